"""Snapshots in a real headless Chromium against the live server and the real Docker engine:
"Snapshot" with a name on a sandbox's page, the snapshot on Home, "New sandbox from it" opens
the new sandbox (its file there), and Delete asks first (data-confirm: static/web/app.js,
no inline script) and removes it."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from sandboxes.models import Sandbox, Snapshot
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.web.helpers import off_loop

pytestmark = pytest.mark.docker
PASSWORD = "correct-horse-battery"


def make_world() -> dict[str, Any]:
    reset_backends()
    team = Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=3)
    user = get_user_model().objects.create_user("alice", password=PASSWORD)
    Membership.objects.create(user=user, team=team, role=Role.OWNER)
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    principal = Principal(user=user, team=team, channel=Channel.WEB)
    sandbox = services.create_sandbox(principal, name="source", memory_mb=256, disk_mb=64)
    try:
        services.write_file(principal, sandbox.id, "notes.txt", "kept in the snapshot\n")
    except BaseException:
        services.delete_sandbox(principal, sandbox.id)  # the fixture never yields then
        raise
    return {"principal": principal, "sandbox": sandbox.id}


def leftovers(world: dict[str, Any]) -> None:
    principal = world["principal"]
    for sandbox in Sandbox.objects.filter(team=principal.team).live():
        services.delete_sandbox(principal, sandbox.public_id)
    for snapshot in Snapshot.objects.live().filter(team=principal.team):
        services.delete_snapshot(principal, snapshot.public_id)


@pytest.fixture
def world(live_db, settings, tmp_path) -> Any:
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    settings.SANDHUB_SNAPSHOT_DIR = tmp_path / "snapshots"
    made = off_loop(make_world)
    yield made
    off_loop(leftovers, made)
    reset_backends()


def test_snapshot_new_sandbox_from_it_and_delete(asgi_server, world, chromium, screenshots):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    page.goto(f"{asgi_server}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{asgi_server}/")

    page.goto(f"{asgi_server}/sandboxes/{world['sandbox']}/")
    page.fill("#snapshot-name", "from the browser")
    page.click("#snapshot-submit")
    page.wait_for_url(f"{asgi_server}/#snapshots")
    row = page.locator("tr.snapshot-row", has_text="from the browser")
    assert "ready" in row.inner_text() and "Snapshot from the browser was taken" in page.content()
    screenshots(page, "home-snapshots")

    row.locator("button.snapshot-new").click()
    page.wait_for_url(f"{asgi_server}/sandboxes/sb_*/")
    made = page.url.rstrip("/").rsplit("/", 1)[1]
    assert made != world["sandbox"]
    read = off_loop(services.read_file, world["principal"], made, "notes.txt")
    assert read.content == b"kept in the snapshot\n"

    page.goto(f"{asgi_server}/#snapshots")
    page.locator("tr.snapshot-row", has_text="from the browser").locator(
        "button.snapshot-delete"
    ).click()
    page.wait_for_url(f"{asgi_server}/#snapshots")
    page.locator("li.message", has_text="Snapshot from the browser was deleted").wait_for()
    assert asked == [
        "Delete snapshot from the browser and its files? Sandboxes made from it keep theirs."
    ]
    assert off_loop(lambda: Snapshot.objects.get().status) == "deleted"
    context.close()
