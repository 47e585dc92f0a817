"""Snapshot services on the in-memory backend (tests/fake_snapshots.py): take, list, show,
delete, start a sandbox from one (on its host, or moved to another host of the kind), fork;
quotas checked before and after, nothing left over them; another team's snapshot is not
found, exactly as a made-up id; every change audited. The real engine and sshd:
tests/docker/test_snapshots.py, tests/services/test_snapshots_docker.py,
tests/ssh/test_snapshots.py."""

from __future__ import annotations

import pytest

from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import (
    BackendFailure,
    Conflict,
    InvalidInput,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from sandboxes.contract.results import UploadFile
from sandboxes.models import Sandbox, Snapshot, SnapshotStatus
from tenants.models import AuditLog, Team

pytestmark = pytest.mark.django_db
GHOST = "snap_0000ghost000"


@pytest.fixture
def fake(fake_backend):
    fake_backend.snapshots = {}
    fake_backend.fail_snapshot = None
    fake_backend.provisioned_from = []
    yield fake_backend
    fake_backend.snapshots = {}
    fake_backend.fail_snapshot = None
    fake_backend.provisioned_from = []


@pytest.fixture
def source(fake, as_alice):
    info = services.create_sandbox(as_alice, name="prepared", cpus=0.5, memory_mb=256)
    services.upload_files(as_alice, info.id, [UploadFile("deps/lib.py", b"x = 1\n")])
    return info


def rows(action: str) -> list[AuditLog]:
    return list(AuditLog.objects.filter(action=action).order_by("id"))


def test_a_sandbox_from_a_snapshot_has_its_files_image_and_limits(fake, source, as_alice):
    snap = services.snapshot_sandbox(as_alice, source.id, "deps installed")
    assert snap.id.startswith("snap_") and snap.status == "ready" and snap.name == "deps installed"
    assert (snap.sandbox_id, snap.host, snap.host_kind) == (source.id, "local", "docker")
    assert (snap.cpus, snap.memory_mb, snap.size_bytes) == (0.5, 256, 6)
    services.write_file(as_alice, source.id, "deps/lib.py", "x = 2\n")  # the source goes on

    made = services.create_sandbox(as_alice, snapshot=snap.id)
    assert (made.cpus, made.memory_mb, made.image) == (0.5, 256, "python")
    assert services.read_file(as_alice, made.id, "deps/lib.py").content == b"x = 1\n"
    bigger = services.create_sandbox(as_alice, snapshot=snap.id, memory_mb=512)
    assert bigger.memory_mb == 512  # what is given wins

    [taken] = rows("snapshot.create")
    assert (taken.target_type, taken.target_id, taken.outcome) == ("snapshot", snap.id, "ok")
    assert taken.details["sandbox"] == source.id and taken.details["size_bytes"] == 6
    created = rows("sandbox.create")[-2]
    assert created.details["snapshot"] == snap.id and created.target_id == made.id


def test_list_get_and_delete(fake, source, as_alice, as_victor):
    snap = services.snapshot_sandbox(as_alice, source.id, "one")
    assert [s.id for s in services.list_snapshots(as_victor)] == [snap.id]
    assert services.get_snapshot(as_victor, snap.id).name == "one"
    with pytest.raises(PermissionDenied, match="viewer may not delete snapshots"):
        services.delete_snapshot(as_victor, snap.id)
    with pytest.raises(PermissionDenied, match="viewer may not take snapshots"):
        services.snapshot_sandbox(as_victor, source.id, "two")

    gone = services.delete_snapshot(as_alice, snap.id)
    assert gone.status == "deleted" and fake.snapshots == {}
    assert Snapshot.objects.get(public_id=snap.id).deleted_at is not None
    assert services.list_snapshots(as_alice) == []
    for call in (services.get_snapshot, services.delete_snapshot):
        with pytest.raises(NotFound, match=f"snapshot {snap.id} not found"):
            call(as_alice, snap.id)
    with pytest.raises(NotFound):
        services.create_sandbox(as_alice, snapshot=snap.id)
    assert services.snapshot_sandbox(as_alice, source.id, "one").name == "one"  # name free
    assert [r.outcome for r in rows("snapshot.delete")] == ["forbidden", "ok", "not_found"]


def test_another_teams_snapshot_answers_like_a_made_up_id(fake, source, as_alice, as_bob):
    snap = services.snapshot_sandbox(as_alice, source.id, "alpha's")
    calls = {
        "get": lambda p, i: services.get_snapshot(p, i),
        "delete": lambda p, i: services.delete_snapshot(p, i),
        "create": lambda p, i: services.create_sandbox(p, snapshot=i),
    }
    for name, call in calls.items():
        with pytest.raises(NotFound) as real:
            call(as_bob, snap.id)
        with pytest.raises(NotFound) as ghost:
            call(as_bob, GHOST)
        assert str(real.value) == str(ghost.value).replace(GHOST, snap.id), name
    assert services.list_snapshots(as_bob) == []
    assert Sandbox.objects.filter(team__slug="beta").count() == 0
    assert Snapshot.objects.get(public_id=snap.id).status == SnapshotStatus.READY
    with pytest.raises(InvalidInput, match="malformed snapshot id"):
        services.get_snapshot(as_bob, "sb_notasnapshot")


def test_names_are_required_and_unique_in_the_team(fake, source, as_alice):
    with pytest.raises(InvalidInput, match="needs a name"):
        services.snapshot_sandbox(as_alice, source.id, "  ")
    services.snapshot_sandbox(as_alice, source.id, "same")
    with pytest.raises(Conflict, match="already has a snapshot named 'same'"):
        services.snapshot_sandbox(as_alice, source.id, "same")
    assert Snapshot.objects.count() == 1 and len(fake.snapshots) == 1


def test_over_the_count_quota_nothing_is_written(fake, source, as_alice, team_a):
    team_a.max_snapshots = 1
    team_a.save()
    services.snapshot_sandbox(as_alice, source.id, "first")
    fake.fail_snapshot = "the backend must not be asked"
    with pytest.raises(QuotaExceeded, match="at most 1 snapshots"):
        services.snapshot_sandbox(as_alice, source.id, "second")
    assert list(Snapshot.objects.values_list("name", flat=True)) == ["first"]
    assert len(fake.snapshots) == 1
    assert rows("snapshot.create")[-1].outcome == "quota"


def test_over_the_bytes_quota_nothing_is_left(fake, source, as_alice, team_a):
    team_a.max_snapshot_mb = 1
    team_a.save()
    big = UploadFile("big.bin", b"\x01" * (1024 * 1024 + 1))
    services.upload_files(as_alice, source.id, [big])
    with pytest.raises(QuotaExceeded, match="this one takes 1 MB .* so it was not kept"):
        services.snapshot_sandbox(as_alice, source.id, "too big")
    assert not Snapshot.objects.exists() and fake.snapshots == {}
    [refused] = rows("snapshot.create")
    assert refused.outcome == "quota" and refused.target_id.startswith("snap_")

    services.write_file(as_alice, source.id, "big.bin", "small")  # fits now: 1 MB in all
    services.snapshot_sandbox(as_alice, source.id, "fits")
    Snapshot.objects.update(size_bytes=1024 * 1024)  # the quota is full
    fake.fail_snapshot = "the backend must not be asked"
    with pytest.raises(QuotaExceeded, match="1 MB are taken"):
        services.snapshot_sandbox(as_alice, source.id, "no room")


def test_a_failed_snapshot_leaves_no_row(fake, source, as_alice):
    fake.fail_snapshot = "disk full"
    with pytest.raises(BackendFailure, match="could not take a snapshot .* disk full"):
        services.snapshot_sandbox(as_alice, source.id, "broken")
    assert not Snapshot.objects.exists()


def test_on_another_host_of_the_kind_the_snapshot_is_moved(fake, source, as_alice, docker_host):
    snap = services.snapshot_sandbox(as_alice, source.id, "moving")
    other = Host.objects.create(name="other", kind="docker", endpoint="unix:///other.sock")
    Host.objects.filter(pk=docker_host.pk).update(max_sandboxes=1)  # the snapshot's host is full
    made = services.create_sandbox(as_alice, snapshot=snap.id)
    assert made.host == "other"
    assert services.read_file(as_alice, made.id, "deps/lib.py").content == b"x = 1\n"
    assert list(fake.snapshots) == [snap.id]  # the moved copy is gone again
    assert rows("sandbox.create")[-1].details["moved_from"] == "local"
    Host.objects.filter(pk=other.pk).update(kind="ssh")  # no docker host has room now
    with pytest.raises(Exception, match="no docker host .* has room"):
        services.create_sandbox(as_alice, snapshot=snap.id)


def test_a_fork_is_a_sandbox_with_the_files_and_keeps_no_snapshot(fake, source, as_alice):
    """The fork's own snapshot: outside the quotas (a team at its snapshot quota can fork),
    handed to the backend as one it may move into the new sandbox, deleted at the end."""
    Team.objects.filter(slug="alpha").update(max_snapshots=0)
    kept, made = services.fork_sandbox(as_alice, source.id, name="branch")
    assert kept is None and made.name == "branch"
    assert services.read_file(as_alice, made.id, "deps/lib.py").content == b"x = 1\n"
    assert services.list_snapshots(as_alice) == [] and fake.snapshots == {}
    [taken], [deleted] = rows("snapshot.create"), rows("snapshot.delete")
    assert taken.target_id == deleted.target_id and deleted.outcome == "ok"
    assert taken.details["name"].startswith(f"fork of {source.id} ")
    assert rows("sandbox.create")[-1].details["snapshot"] == taken.target_id
    assert fake.provisioned_from[-1]["consumed_by_one"] is True


def test_a_fork_keeps_its_snapshot_when_asked(fake, source, as_alice):
    snap, made = services.fork_sandbox(
        as_alice, source.id, name="branch", snapshot_name="before", keep_snapshot=True
    )
    assert snap is not None and snap.name == "before" and made.name == "branch"
    assert services.read_file(as_alice, made.id, "deps/lib.py").content == b"x = 1\n"
    assert [s.id for s in services.list_snapshots(as_alice)] == [snap.id]
    assert "consumed_by_one" not in fake.provisioned_from[-1]


def test_a_fork_that_fails_to_start_leaves_no_snapshot(fake, source, as_alice):
    fake.fail_provision = "no room on the host"
    with pytest.raises(BackendFailure, match="no room on the host"):
        services.fork_sandbox(as_alice, source.id)
    fake.fail_provision = None
    assert services.list_snapshots(as_alice) == [] and fake.snapshots == {}
    assert Sandbox.objects.filter(team__slug="alpha").exclude(status="deleted").count() == 1


def test_a_stopped_sandbox_cannot_be_snapshotted(fake, source, as_alice):
    services.delete_sandbox(as_alice, source.id)
    with pytest.raises(NotFound):
        services.snapshot_sandbox(as_alice, source.id, "late")


def test_a_snapshot_holding_a_disk_fixes_the_new_disk_size(fake, source, as_alice):
    snap = services.snapshot_sandbox(as_alice, source.id, "disk")
    row = Snapshot.objects.get(public_id=snap.id)  # as a backend that copies a disk says
    row.backend_state, row.disk_mb = {**row.backend_state, "disk_mb": 1024}, None
    row.save()
    with pytest.raises(InvalidInput, match="has its disk of 1024 MB"):
        services.create_sandbox(as_alice, snapshot=snap.id, disk_mb=2048)
    assert services.create_sandbox(as_alice, snapshot=snap.id).disk_mb == 1024


def test_a_snapshot_being_taken_holds_off_a_pause_or_stop_and_a_pause_a_snapshot(
    fake, source, as_alice
):
    """A snapshot pauses and unpauses the container itself: a pause or a stop in between would
    be undone by it, and the row would say paused of a running container. So neither may
    claim the sandbox while one is being taken, nor a snapshot start while a claim is held."""
    row = Sandbox.objects.get(public_id=source.id)
    taking = Snapshot.objects.create(
        team=row.team,
        name="in flight",
        source=row,
        host_kind=row.host.kind,
        host=row.host,
        image=row.image,
        status=SnapshotStatus.CREATING,
        cpus=0.5,
        memory_mb=256,
    )
    for service in (services.pause_sandbox, services.stop_sandbox):
        with pytest.raises(Conflict, match="a snapshot of it is being taken"):
            service(as_alice, source.id)
    assert Sandbox.objects.get(public_id=source.id).status == "running"
    taking.status = SnapshotStatus.READY
    taking.save()
    Sandbox.objects.filter(public_id=source.id).update(status="pausing")  # a claim held
    before = Snapshot.objects.count()
    with pytest.raises(Conflict):
        services.snapshot_sandbox(as_alice, source.id, "during a pause")
    assert Snapshot.objects.count() == before
