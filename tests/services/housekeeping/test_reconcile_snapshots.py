"""Reconciliation of snapshots: snapshot files of this instance that no snapshot row names
(a taking cut short, a moved copy left behind) are removed once older than the grace period,
like other orphans; a snapshot's own files, young ones and other deployments' stay. On the
in-memory backend, then with the Docker backend's real files."""

from __future__ import annotations

import json
import time

import pytest

from hosts.backends import get_backend
from hosts.backends.base import LABEL_INSTANCE, LABEL_SNAPSHOT
from sandboxes import services
from sandboxes.contract.results import UploadFile
from sandboxes.models import Sandbox
from tests.fakes import FakeBackend
from tests.services.housekeeping.helpers import INSTANCE, SYSTEM, audit_of


def left_over(backend, snapshot_id: str, instance: str, age_s: float) -> None:
    labels = {LABEL_INSTANCE: instance, LABEL_SNAPSHOT: snapshot_id}
    backend._keep(snapshot_id, labels, {"f": b"x"})
    FakeBackend.snapshots[snapshot_id]["created"] -= age_s


def test_orphan_snapshots_of_this_instance_are_removed(
    fake_backend, as_alice, docker_host, settings
):
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 60
    FakeBackend.snapshots = {}
    backend = get_backend(docker_host)
    source = services.create_sandbox(as_alice)
    kept = services.snapshot_sandbox(as_alice, source.id, "kept")
    FakeBackend.snapshots[kept.id]["created"] -= 3600
    left_over(backend, "snap_orphan0000", INSTANCE, 3600)
    left_over(backend, "snap_young00000", INSTANCE, 5)
    left_over(backend, "snap_elsewhere0", "another-deployment", 3600)

    report = services.reconcile_hosts(SYSTEM)

    assert report.removed == ["snap_orphan0000"]
    assert set(FakeBackend.snapshots) == {kept.id, "snap_young00000", "snap_elsewhere0"}
    row = audit_of("reconcile.orphan_removed")
    assert (row.target_type, row.target_id) == ("snapshot", "snap_orphan0000")
    FakeBackend.snapshots = {}


@pytest.mark.docker
@pytest.mark.django_db
def test_real_snapshot_files_without_a_row_are_removed(
    real_docker, as_alice, settings, tmp_path, engine
):
    settings.SANDHUB_SNAPSHOT_DIR = tmp_path / "snapshots"
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 0
    source = services.create_sandbox(as_alice, disk_mb=64)
    try:
        services.upload_files(as_alice, source.id, [UploadFile("a.txt", b"a")])
        kept = services.snapshot_sandbox(as_alice, source.id, "kept")
        labels = {LABEL_INSTANCE: INSTANCE, LABEL_SNAPSHOT: "snap_orphan0000"}
        backend = get_backend(real_docker)
        state = Sandbox.objects.get(public_id=source.id).backend_state
        backend.snapshot(state, "snap_orphan0000", labels)
        half = tmp_path / "snapshots" / "snap_halfmade00.partial"  # a killed attempt's
        half.mkdir()
        half_labels = {**labels, LABEL_SNAPSHOT: "snap_halfmade00"}
        (half / "meta.json").write_text(json.dumps({"labels": half_labels, "host": real_docker.pk}))
        time.sleep(0.01)

        report = services.reconcile_hosts(SYSTEM)

        assert sorted(report.removed) == ["snap_halfmade00", "snap_orphan0000"]
        assert sorted(p.name for p in (tmp_path / "snapshots").iterdir()) == [kept.id]
        services.delete_snapshot(as_alice, kept.id)
        assert list((tmp_path / "snapshots").iterdir()) == []
    finally:
        services.delete_sandbox(as_alice, source.id)
