"""The files section and the sandbox page's own actions in a real headless Chromium, against
the live server and the real Docker engine: a new folder, rename, delete (asking first), a
drag-and-drop upload of several files and of a folder (a real drop event carrying a
DataTransfer) with its progress and errors, the new-file hint naming the folder
shown, the warning before the sandbox expires with its Extend button, and Delete on the
sandbox page. Screenshots under the test's tmp_path (`pytest -s` prints where)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.web.helpers import off_loop

pytestmark = pytest.mark.docker

PASSWORD = "correct-horse-battery"

# Drops a tree made in the page on the files section, as a person dragging files and folders
# from the desktop would: dragenter, dragover (the section accepts) and drop, carrying the
# DataTransfer. `tree`: name -> text (a file) or -> tree (a folder). A page cannot make a
# folder's DataTransfer itself, so each item's entry (webkitGetAsEntry, the File and
# Directory Entries API the script reads) is given here, with a folder's reader.
DROP = """(tree) => {
  const transfer = new DataTransfer();
  const entries = new Map();
  function entryOf(name, value) {
    if (typeof value === "string") {
      const file = new File([value], name);
      return { isFile: true, isDirectory: false, name, file: (ok) => ok(file) };
    }
    const children = Object.entries(value).map(([n, v]) => entryOf(n, v));
    const createReader = () => {
      let given = false;
      return {
        readEntries: (ok) => {
          const batch = given ? [] : children;
          given = true;
          setTimeout(() => ok(batch));  // later, as a browser answers
        },
      };
    };
    return { isFile: false, isDirectory: true, name, createReader };
  }
  for (const [name, value] of Object.entries(tree)) {
    transfer.items.add(new File([typeof value === "string" ? value : ""], name));
    entries.set(name, entryOf(name, value));
  }
  DataTransferItem.prototype.webkitGetAsEntry = function () {
    return entries.get(this.getAsFile().name) || null;
  };
  const target = document.querySelector("#files");
  for (const type of ["dragenter", "dragover", "drop"]) {
    const init = { dataTransfer: transfer, bubbles: true, cancelable: true };
    target.dispatchEvent(new DragEvent(type, init));
  }
  return target.classList.contains("drop-target");
}"""


def make_world() -> dict[str, Any]:
    reset_backends()
    # The module's database lives as long as the module: the people are made once.
    team, made = Team.objects.get_or_create(slug="alpha", defaults={"name": "Team Alpha"})
    if made:
        user = get_user_model().objects.create_user("alice", password=PASSWORD)
        Membership.objects.create(user=user, team=team, role=Role.OWNER)
        reference = settings.SANDHUB_SANDBOX_IMAGE
        Image.objects.create(name="python", reference=reference, is_default=True)
        Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    user = get_user_model().objects.get(username="alice")
    principal = Principal(user=user, team=team, channel=Channel.WEB)
    info = services.create_sandbox(principal, name="filer", memory_mb=256)
    for path, text in (("old.txt", "old\n"), ("docs/readme.txt", "r\n"), ("trash/in/x", "x")):
        services.write_file(principal, info.id, path, text)
    return {"principal": principal, "sandbox": info.id}


def leftovers(world: dict[str, Any]) -> None:
    if Sandbox.objects.get(public_id=world["sandbox"]).status != "deleted":
        services.delete_sandbox(world["principal"], world["sandbox"])


def listing(world: dict[str, Any], path: str) -> list[str]:
    entries = services.list_files(world["principal"], world["sandbox"], path)
    return sorted(e.name for e in entries)


def content(world: dict[str, Any], path: str) -> bytes:
    return services.read_file(world["principal"], world["sandbox"], path).content


@pytest.fixture
def world(live_db, settings) -> Any:
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    made = off_loop(make_world)
    yield made
    off_loop(leftovers, made)
    reset_backends()


@pytest.fixture
def page(asgi_server, chromium) -> Any:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.asked = []  # what each data-confirm asked, accepted
    page.on("dialog", lambda dialog: (page.asked.append(dialog.message), dialog.accept()))
    page.goto(f"{asgi_server}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{asgi_server}/")
    yield page
    context.close()


def test_new_folder_rename_and_delete(asgi_server, world, page, screenshots) -> None:
    print(f"\nscreenshots: {screenshots.directory}")
    page.goto(f"{asgi_server}/sandboxes/{world['sandbox']}/")
    page.fill("#new-folder-name", "made/deeper")
    page.click("#new-folder-submit")
    page.wait_for_selector("tr.dir-row[data-path='/workspace/made']")
    assert "Created folder /workspace/made/deeper." in page.inner_text(".messages")
    assert off_loop(listing, world, "/workspace/made") == ["deeper"]

    row = page.locator("tr[data-path='/workspace/old.txt']")
    row.locator("summary").click()
    row.locator("input.rename-to").fill("new.txt")
    row.locator("button.rename-submit").click()
    page.wait_for_selector("tr[data-path='/workspace/new.txt']")
    assert "Renamed /workspace/old.txt to /workspace/new.txt." in page.inner_text(".messages")
    assert page.locator("tr[data-path='/workspace/old.txt']").count() == 0
    screenshots(page, "renamed")

    # A move by path, into a folder that is there; an existing name is refused with a message.
    row = page.locator("tr[data-path='/workspace/new.txt']")
    row.locator("summary").click()
    row.locator("input.rename-to").fill("docs/readme.txt")
    row.locator("button.rename-submit").click()
    page.wait_for_selector(".messages .error")
    assert "/workspace/docs/readme.txt already exists" in page.inner_text(".messages")

    page.locator("tr[data-path='/workspace/trash'] button.delete-file").click()
    page.wait_for_selector("tr[data-path='/workspace/trash']", state="detached")
    assert "Deleted /workspace/trash." in page.inner_text(".messages")
    assert page.asked and "Delete /workspace/trash and everything in it?" in page.asked[-1]
    assert off_loop(listing, world, "/workspace") == ["docs", "made", "new.txt"]
    screenshots(page, "deleted")


def test_the_new_file_hint_and_place_follow_the_folder_shown(asgi_server, world, page) -> None:
    page.goto(f"{asgi_server}/sandboxes/{world['sandbox']}/")
    assert "(/workspace)" in page.inner_text("#new-file-form")
    page.click("#file-table a.dir-link:text('docs/')")  # swapped in place by htmx
    page.wait_for_selector("#files[data-directory='/workspace/docs']")
    hint = page.inner_text("#new-file-form")
    assert "New text file in /workspace/docs" in hint
    assert "Relative paths start at the folder shown (/workspace/docs)." in hint
    page.fill("#file_path", "note.txt")
    page.fill("#file_content", "in docs\n")
    page.click("#new-file-submit")
    page.wait_for_selector("tr[data-path='/workspace/docs/note.txt']")
    assert off_loop(content, world, "/workspace/docs/note.txt") == b"in docs\n"


def test_drag_and_drop_upload(asgi_server, world, page, screenshots, settings) -> None:
    page.goto(f"{asgi_server}/sandboxes/{world['sandbox']}/?path=/workspace/docs")
    assert page.evaluate(DROP, {"one.txt": "first\n", "two.txt": "second\n"}) is False
    page.wait_for_selector("tr[data-path='/workspace/docs/two.txt']")
    assert "Uploaded 2 files (13 bytes) to /workspace/docs." in page.inner_text("#drop-status")
    assert off_loop(content, world, "/workspace/docs/one.txt") == b"first\n"
    screenshots(page, "dropped")

    # A folder is uploaded with what it holds, folders inside it too.
    page.evaluate(DROP, {"three.txt": "3", "a-folder": {"x.txt": "X", "sub": {"y.txt": "Y"}}})
    page.wait_for_selector("tr[data-path='/workspace/docs/a-folder']")
    said = page.inner_text("#drop-status")
    assert "Uploaded 1 file (1 bytes) to /workspace/docs/a-folder/sub." in said
    assert off_loop(content, world, "/workspace/docs/a-folder/sub/y.txt") == b"Y"
    assert off_loop(content, world, "/workspace/docs/a-folder/x.txt") == b"X"
    assert off_loop(content, world, "/workspace/docs/three.txt") == b"3"

    settings.SANDHUB_MAX_TRANSFER_BYTES = 1024  # the live server runs in this process
    page.evaluate(DROP, {"big.bin": "x" * 4096})
    page.wait_for_selector("#drop-status.error")
    assert "Upload failed: Uploads are limited to 1024 bytes" in page.inner_text("#drop-status")
    page.evaluate(DROP, {"empty-folder": {}})
    page.wait_for_function(
        "() => document.querySelector('#drop-message').textContent.startsWith('Nothing')"
    )
    screenshots(page, "drop-refused")
    assert "big.bin" not in off_loop(listing, world, "/workspace/docs")


def expire_in(world: dict[str, Any], minutes: int) -> None:
    soon = timezone.now() + timedelta(minutes=minutes)
    Sandbox.objects.filter(public_id=world["sandbox"]).update(expires_at=soon)


def test_expiry_warning_extend_and_delete_on_the_page(asgi_server, world, page, screenshots):
    page.goto(f"{asgi_server}/sandboxes/{world['sandbox']}/")
    assert page.locator("#expiry-warning").count() == 0  # an hour left: no warning
    off_loop(expire_in, world, 5)
    page.reload()
    warning = page.inner_text("#expiry-warning")
    assert "This sandbox expires in 5 minutes" in warning
    screenshots(page, "expiry-warning")
    page.click("#expiry-extend")
    page.wait_for_selector("#expiry-warning", state="detached")
    assert "lives 60 minutes longer" in page.inner_text(".messages")

    page.click("#sandbox-delete")
    page.wait_for_url(f"{asgi_server}/")
    assert "Sandbox filer was deleted." in page.inner_text(".messages")
    assert "its command history stays" in page.asked[-1]
    assert off_loop(lambda: Sandbox.objects.get(public_id=world["sandbox"]).status) == "deleted"
    screenshots(page, "deleted-from-its-page")
