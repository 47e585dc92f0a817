"""Snapshots on the pages (sandboxes/web/snapshots.py): "Snapshot" with a name on a running
sandbox's page, the team's snapshots on Home with "New sandbox from it" and Delete (asked
first: data-confirm, no inline script), the snapshot quotas among Home's; a viewer sees no
such controls and is refused anyway; another team's snapshot is not found. In-process
clients on the in-memory backend."""

from __future__ import annotations

import re

import pytest

from sandboxes import services
from sandboxes.contract.results import UploadFile
from sandboxes.models import Sandbox, Snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    fake_backend.snapshots = {}
    info = services.create_sandbox(as_alice, name="prepared")
    services.upload_files(as_alice, info.id, [UploadFile(path="kept.txt", content=b"kept\n")])
    return info.id


def test_snapshot_start_from_it_and_delete(login, alice, sandbox, as_alice):
    client = login(alice)
    page = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert f'action="/sandboxes/{sandbox}/snapshot/"' in page and 'id="snapshot-name"' in page

    taken = client.post(f"/sandboxes/{sandbox}/snapshot/", {"name": "first"}, follow=True)
    assert taken.redirect_chain[-1][0] == "/#snapshots"
    home = taken.content.decode()
    snap = Snapshot.objects.get(name="first")
    assert "Snapshot first was taken" in home
    row = re.search(rf'<tr class="snapshot-row" data-snapshot-id="{snap.public_id}">(.*?)</tr>',
                    home, re.S)  # fmt: skip
    assert row and "New sandbox from it" in row.group(1)
    assert 'data-confirm="Delete snapshot first and its files?' in row.group(1)
    assert "1 of 10" in home  # the snapshot quota among the others

    made = client.post(f"/snapshots/{snap.public_id}/new/")
    new = Sandbox.objects.exclude(public_id=sandbox).get()
    assert made.status_code == 302 and made["Location"] == f"/sandboxes/{new.public_id}/"
    assert services.read_file(as_alice, new.public_id, "kept.txt").content == b"kept\n"

    again = client.post(f"/sandboxes/{sandbox}/snapshot/", {"name": "first"}, follow=True)
    assert "No snapshot was taken: the team already has a snapshot named" in again.content.decode()

    gone = client.post(f"/snapshots/{snap.public_id}/delete/", follow=True)
    assert "Snapshot first was deleted" in gone.content.decode()
    assert Snapshot.objects.get(pk=snap.pk).status == "deleted"
    assert "No snapshots." in gone.content.decode()


def test_a_viewer_sees_and_may_not_and_another_team_finds_nothing(
    login, alice, victor, bob, sandbox
):
    login(alice).post(f"/sandboxes/{sandbox}/snapshot/", {"name": "only"})
    snap = Snapshot.objects.get()
    viewer = login(victor)
    assert 'id="snapshot-form"' not in viewer.get(f"/sandboxes/{sandbox}/").content.decode()
    home = viewer.get("/").content.decode()
    assert snap.public_id in home and "snapshot-delete" not in home
    assert viewer.post(f"/snapshots/{snap.public_id}/delete/").status_code == 403
    assert viewer.post(f"/sandboxes/{sandbox}/snapshot/", {"name": "x"}).status_code == 403
    other = login(bob)
    assert snap.public_id not in other.get("/").content.decode()
    for url in (f"/snapshots/{snap.public_id}/new/", f"/snapshots/{snap.public_id}/delete/"):
        assert other.post(url).status_code == 404
    assert Snapshot.objects.get().status == "ready" and Sandbox.objects.count() == 1
