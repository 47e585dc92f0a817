"""Django admin of snapshots (sandboxes/admin/snapshots.py): read-only pages with their team's
quotas beside them in the team's page; deletion only through the service (confirmed first,
files removed, audited, the row kept)."""

from __future__ import annotations

import pytest
from django.test import Client

from sandboxes import services
from sandboxes.models import Snapshot, SnapshotStatus
from tenants.models import AuditLog, Channel, Team
from tests.admin.helpers import action, url

pytestmark = pytest.mark.django_db


@pytest.fixture
def snapshot(fake_backend, as_alice) -> Snapshot:
    fake_backend.snapshots = {}
    source = services.create_sandbox(as_alice)
    made = services.snapshot_sandbox(as_alice, source.id, "in admin")
    return Snapshot.objects.get(public_id=made.id)


def test_pages_are_read_only_and_quotas_are_in_the_team_page(
    staff_client: Client, snapshot: Snapshot
) -> None:
    listed = staff_client.get(url(Snapshot, "changelist")).content.decode()
    assert snapshot.public_id in listed and "in admin" in listed
    page = staff_client.get(url(snapshot, "change", snapshot.pk))
    assert page.status_code == 200 and "snapshot_id" in page.content.decode()
    assert staff_client.post(url(snapshot, "change", snapshot.pk), {"name": "x"}).status_code == 403
    assert staff_client.get(url(Snapshot, "add")).status_code == 403
    team = staff_client.get(url(Team, "change", snapshot.team_id)).content.decode()
    assert 'name="max_snapshots"' in team and 'name="max_snapshot_mb"' in team


def test_delete_confirms_then_goes_through_the_service(
    staff_client: Client, snapshot: Snapshot, superuser, fake_backend
) -> None:
    asked = action(staff_client, Snapshot, "delete_selected", [snapshot.pk])
    assert asked.status_code == 200 and snapshot.public_id in asked.content.decode()
    assert Snapshot.objects.get(pk=snapshot.pk).status == SnapshotStatus.READY
    done = action(staff_client, Snapshot, "delete_selected", [snapshot.pk], post="yes")
    assert done.status_code == 302
    snapshot.refresh_from_db()
    assert snapshot.status == SnapshotStatus.DELETED and fake_backend.snapshots == {}
    row = AuditLog.objects.get(action="snapshot.delete")
    assert (row.channel, row.actor, row.team_id) == (Channel.ADMIN, superuser, snapshot.team_id)
