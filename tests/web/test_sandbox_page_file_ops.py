"""The files section's delete, rename and new folder, the new-file hint, the dropped-files
upload's JSON answers, the expiry warning and Delete on the sandbox page, through the test
client on the in-memory backend; who may do them (another team: not found; a viewer:
refused)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import services
from sandboxes.models import Sandbox
from tests.web.helpers import files_of

pytestmark = pytest.mark.django_db


def messages_of(response) -> list[str]:
    """The messages a redirect leaves for the next page (and those before it, unread)."""
    return [str(m) for m in response.wsgi_request._messages]


def last_message(response) -> str:
    return messages_of(response)[-1]


def test_the_new_file_hint_names_the_folder_shown(login, sandbox, alice, as_alice) -> None:
    services.write_file(as_alice, sandbox, "src/app.py", "print(1)\n")
    client = login(alice)
    top = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert "Relative paths start at the folder shown (/workspace)." in top
    inner = client.get(f"/sandboxes/{sandbox}/?path=/workspace/src").content.decode()
    assert "Relative paths start at the folder shown (/workspace/src)." in inner
    assert "(/workspace)." not in inner
    swapped = client.get(
        f"/sandboxes/{sandbox}/files/?path=/workspace/src", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "Relative paths start at the folder shown (/workspace/src)." in swapped
    saved = client.post(
        f"/sandboxes/{sandbox}/files/new/",
        {"path": "notes.txt", "content": "x", "directory": "/workspace/src"},
    )
    assert saved.status_code == 302 and "/workspace/src/notes.txt" in files_of(sandbox)


def test_mkdir_rename_and_delete_from_the_page(login, sandbox, alice) -> None:
    client = login(alice)
    base = f"/sandboxes/{sandbox}/files/"
    made = client.post(base + "mkdir/", {"name": "docs/drafts", "directory": "/workspace"})
    assert made.status_code == 302 and made["Location"].endswith(f"/sandboxes/{sandbox}/#files")
    assert last_message(made) == "Created folder /workspace/docs/drafts."
    # A bare name renames within the entry's folder; the page goes back to the folder shown.
    renamed = client.post(
        base + "rename/", {"path": "/workspace/a.txt", "to": "b.txt", "directory": "/workspace"}
    )
    assert last_message(renamed) == "Renamed /workspace/a.txt to /workspace/b.txt."
    moved = client.post(
        base + "rename/",
        {"path": "/workspace/b.txt", "to": "docs/drafts/c.txt", "directory": "/workspace/docs"},
    )
    assert moved["Location"].endswith("?path=%2Fworkspace%2Fdocs#files")
    assert files_of(sandbox) == {"/workspace/docs/drafts/c.txt": b"hello\n"}
    page = client.get(f"/sandboxes/{sandbox}/?path=/workspace/docs").content.decode()
    assert 'data-path="/workspace/docs/drafts"' in page
    assert "Delete /workspace/docs/drafts and everything in it?" in page  # data-confirm
    deleted = client.post(base + "delete/", {"path": "drafts", "directory": "/workspace/docs"})
    assert last_message(deleted) == "Deleted /workspace/docs/drafts."
    assert files_of(sandbox) == {}


@pytest.mark.parametrize(
    "url, data, said",
    [
        ("delete/", {"path": "missing.txt"}, "/workspace/missing.txt not found"),
        ("delete/", {"path": ""}, "must be a non-empty string"),
        ("delete/", {"path": "/workspace"}, "not the folder itself"),
        ("rename/", {"path": "a.txt", "to": "/etc/passwd"}, "must be inside /workspace"),
        ("mkdir/", {"name": "a.txt"}, "/workspace/a.txt already exists"),
        ("mkdir/", {"name": "a.txt/sub"}, "/workspace/a.txt is a file, not a folder"),
    ],
)
def test_refused_operations_are_a_message(login, sandbox, alice, url, data, said) -> None:
    response = login(alice).post(f"/sandboxes/{sandbox}/files/{url}", data)
    assert response.status_code == 302 and said in last_message(response)
    assert files_of(sandbox) == {"/workspace/a.txt": b"hello\n"}


@pytest.mark.parametrize("url", ["delete/", "rename/", "mkdir/"])
def test_viewers_and_other_teams_are_refused(login, sandbox, victor, bob, url) -> None:
    data = {"path": "a.txt", "to": "z.txt", "name": "new"}
    viewer = login(victor).post(f"/sandboxes/{sandbox}/files/{url}", data)
    assert viewer.status_code == 403 and "viewer" in viewer.content.decode()
    stranger = login(bob).post(f"/sandboxes/{sandbox}/files/{url}", data)
    assert stranger.status_code == 404
    assert files_of(sandbox) == {"/workspace/a.txt": b"hello\n"}
    page = login(victor).get(f"/sandboxes/{sandbox}/").content.decode()
    assert "delete-file" not in page and "new-folder-form" not in page


def test_dropped_files_get_json(login, sandbox, alice, settings) -> None:
    client = login(alice)
    part = io.BytesIO(b"dropped")
    part.name = "d.txt"
    ok = client.post(
        f"/sandboxes/{sandbox}/files/upload/",
        {"files": [part], "directory": "/workspace/in"},
        HTTP_ACCEPT="application/json",
    )
    assert ok.status_code == 200
    assert ok.json() == {
        "message": "Uploaded 1 file (7 bytes) to /workspace/in.",
        "paths": ["/workspace/in/d.txt"],
    }
    settings.SANDHUB_MAX_TRANSFER_BYTES = 4
    part.seek(0)
    refused = client.post(
        f"/sandboxes/{sandbox}/files/upload/", {"files": [part]}, HTTP_ACCEPT="application/json"
    )
    assert refused.status_code == 400 and "limited to 4 bytes" in refused.json()["error"]


def test_expiry_warning_on_the_page(login, sandbox, alice, victor, settings) -> None:
    client = login(alice)
    assert 'id="expiry-warning"' not in client.get(f"/sandboxes/{sandbox}/").content.decode()
    soon = timezone.now() + timedelta(minutes=12)
    Sandbox.objects.filter(public_id=sandbox).update(expires_at=soon)
    html = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert "This sandbox expires in 12 minutes" in html and 'id="expiry-extend"' in html
    viewer = login(victor).get(f"/sandboxes/{sandbox}/").content.decode()
    assert "This sandbox expires in 12 minutes" in viewer and "expiry-extend" not in viewer
    settings.SANDHUB_EXPIRY_WARNING_MINUTES = 10
    assert 'id="expiry-warning"' not in client.get(f"/sandboxes/{sandbox}/").content.decode()
    # At the team's maximum lifetime: said so, no button.
    settings.SANDHUB_EXPIRY_WARNING_MINUTES = 15
    Sandbox.objects.filter(public_id=sandbox).update(created_at=soon - timedelta(days=1))
    html = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert 'id="expiry-no-extend"' in html and 'id="expiry-extend"' not in html


def test_delete_on_the_sandbox_page(login, sandbox, alice, victor) -> None:
    client = login(alice)
    page = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert 'id="sandbox-delete-form"' in page and "its command history stays" in page
    assert "sandbox-delete-form" not in login(victor).get(f"/sandboxes/{sandbox}/").content.decode()
    response = client.post(f"/sandboxes/{sandbox}/delete/")
    assert response.status_code == 302 and response["Location"] == "/"
    assert Sandbox.objects.get(public_id=sandbox).status == "deleted"
    assert any("was deleted" in m for m in messages_of(response))
