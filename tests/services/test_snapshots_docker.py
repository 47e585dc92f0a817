"""Snapshots through the services on the real Docker engine: a sandbox with files and a package
installed with `pip install --user`, snapshotted; a sandbox made from it has both, the source
keeps working; deleting the snapshot removes its files; another team's snapshot is not found;
over a quota nothing is written (no file, no row); on another host the snapshot is streamed."""

from __future__ import annotations

import io
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import NotFound, QuotaExceeded
from sandboxes.contract.results import SandboxInfo, UploadFile
from sandboxes.models import Sandbox, Snapshot
from tenants.models import AuditLog

pytestmark = [pytest.mark.docker, pytest.mark.django_db]
GHOST = "snap_0000ghost000"


def probe_wheel() -> bytes:
    """A hand-made wheel (no network, no index) with a module and a console script."""
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("sandhub_probe.py", "def main():\n    print('probe ok')\n")
        info = "sandhub_probe-0.1.dist-info/"
        archive.writestr(
            info + "METADATA", "Metadata-Version: 2.1\nName: sandhub-probe\nVersion: 0.1\n"
        )
        archive.writestr(
            info + "WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        scripts = "[console_scripts]\nsandhub-probe = sandhub_probe:main\n"
        archive.writestr(info + "entry_points.txt", scripts)
        archive.writestr(info + "RECORD", "")
    return wheel.getvalue()


@pytest.fixture
def snapshot_dir(settings, tmp_path: Path) -> Path:
    settings.SANDHUB_SNAPSHOT_DIR = tmp_path / "snapshots"
    return settings.SANDHUB_SNAPSHOT_DIR


@pytest.fixture
def prepared(real_docker, as_alice, snapshot_dir) -> Iterator[SandboxInfo]:
    """A sandbox with a project in /workspace and a package installed in its home; what the
    test made is removed after it, even when this set-up itself fails."""
    try:
        info = services.create_sandbox(as_alice, memory_mb=256, disk_mb=64)
        name = "sandhub_probe-0.1-py3-none-any.whl"
        files = [UploadFile("proj/main.py", b"print('main')\n"), UploadFile(name, probe_wheel())]
        services.upload_files(as_alice, info.id, files)
        install = services.run_command(
            as_alice, info.id, f"pip install --user --no-index -q {name} && rm {name}", timeout=120
        )
        assert install.exit_code == 0, install.stderr
        yield info
    finally:
        for sandbox in Sandbox.objects.exclude(status="deleted"):
            services.delete_sandbox(as_alice, sandbox.public_id)
        for snapshot in Snapshot.objects.live():
            services.delete_snapshot(as_alice, snapshot.public_id)
    assert not snapshot_dir.exists() or list(snapshot_dir.iterdir()) == []


def run(principal, sandbox_id: str, command: str) -> str:
    result = services.run_command(principal, sandbox_id, command)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_a_sandbox_from_a_snapshot_has_the_files_and_the_installed_package(
    prepared, as_alice, snapshot_dir
):
    snap = services.snapshot_sandbox(as_alice, prepared.id, "with probe")
    assert (snapshot_dir / snap.id / "workspace.img").is_file()
    assert snap.disk_mb == 64 and snap.size_bytes > 0
    run(as_alice, prepared.id, "echo source-only > later.txt")  # the source keeps working

    made = services.create_sandbox(as_alice, snapshot=snap.id)
    assert (made.disk_mb, made.memory_mb, made.host) == (64, 256, "local")
    assert (
        run(as_alice, made.id, "python3 proj/main.py; ~/.local/bin/sandhub-probe")
        == "main\nprobe ok\n"
    )
    assert run(as_alice, made.id, "ls") == "proj\n"
    assert run(as_alice, prepared.id, "cat later.txt") == "source-only\n"

    services.delete_snapshot(as_alice, snap.id)
    assert not (snapshot_dir / snap.id).exists()
    assert (
        run(as_alice, made.id, "~/.local/bin/sandhub-probe") == "probe ok\n"
    )  # its copy is its own


def test_a_fork_moves_its_snapshots_disk_image_into_the_new_sandbox(
    prepared, as_alice, snapshot_dir, settings, monkeypatch, request
):
    """fork_sandbox's own snapshot is copied once: its disk image is renamed into the new
    sandbox's disk. With the restore's copy broken the fork still works; nothing is left of
    its snapshot, and the branch is its own (a write in one is not seen in the other)."""
    disks = Path(settings.SANDHUB_DISK_DIR).parent
    if snapshot_dir.parent.stat().st_dev != disks.stat().st_dev:  # a /tmp of its own
        snapshot_dir = settings.SANDHUB_SNAPSHOT_DIR = disks / f"snapshots-{prepared.id}"
        request.addfinalizer(lambda: shutil.rmtree(snapshot_dir, ignore_errors=True))

    def no_copy(source: Path, target: Path) -> None:
        raise AssertionError(f"copied {source} instead of moving it")

    monkeypatch.setattr("hosts.backends.docker.disk.copy_sparse", no_copy)
    kept, fork = services.fork_sandbox(as_alice, prepared.id, name="branch")
    assert kept is None and fork.disk_mb == 64
    assert run(as_alice, fork.id, "python3 proj/main.py; ~/.local/bin/sandhub-probe") == (
        "main\nprobe ok\n"
    )
    run(as_alice, fork.id, "echo branch-only > mine.txt")
    assert run(as_alice, prepared.id, "ls") == "proj\n"
    assert list(snapshot_dir.iterdir()) == [] and not Snapshot.objects.live().exists()
    actions = (
        AuditLog.objects.filter(target_type="snapshot")
        .order_by("id")
        .values_list("action", "outcome")
    )
    assert list(actions) == [("snapshot.create", "ok"), ("snapshot.delete", "ok")]


def test_another_teams_snapshot_is_a_made_up_one(prepared, as_alice, as_bob):
    snap = services.snapshot_sandbox(as_alice, prepared.id, "alpha's")
    answers = []
    for snapshot_id in (snap.id, GHOST):
        with pytest.raises(NotFound) as refused:
            services.create_sandbox(as_bob, snapshot=snapshot_id)
        answers.append(str(refused.value).replace(snapshot_id, "ID"))
    assert answers[0] == answers[1] == "snapshot ID not found"
    assert not Sandbox.objects.filter(team=as_bob.team).exists()


def test_over_the_quotas_nothing_is_written(prepared, as_alice, team_a, snapshot_dir):
    team_a.max_snapshot_mb = 1
    team_a.save()
    run(as_alice, prepared.id, "head -c 2000000 /dev/urandom > two-mb.bin")
    with pytest.raises(QuotaExceeded, match="so it was not kept"):
        services.snapshot_sandbox(as_alice, prepared.id, "too big")
    assert not Snapshot.objects.exists()
    assert list(snapshot_dir.iterdir()) == []
    team_a.max_snapshot_mb, team_a.max_snapshots = 1000, 0
    team_a.save()
    with pytest.raises(QuotaExceeded, match="at most 0 snapshots"):
        services.snapshot_sandbox(as_alice, prepared.id, "none allowed")
    assert not Snapshot.objects.exists() and list(snapshot_dir.iterdir()) == []
    outcomes = AuditLog.objects.filter(action="snapshot.create").values_list("outcome", flat=True)
    assert list(outcomes) == ["quota", "quota"]


def test_on_another_host_the_snapshot_is_streamed_there(
    prepared, as_alice, real_docker, snapshot_dir
):
    """A second host row for this same engine (a second engine is not at hand): the first
    is full, so the sandbox goes to the second and the snapshot moves as a tar stream."""
    snap = services.snapshot_sandbox(as_alice, prepared.id, "to move")
    Host.objects.create(name="second", kind="docker", endpoint=real_docker.endpoint)
    Host.objects.filter(pk=real_docker.pk).update(max_sandboxes=1)
    made = services.create_sandbox(as_alice, snapshot=snap.id)
    assert made.host == "second"
    assert (
        run(as_alice, made.id, "python3 proj/main.py; ~/.local/bin/sandhub-probe")
        == "main\nprobe ok\n"
    )
    row = AuditLog.objects.filter(action="sandbox.create").latest("id")
    assert row.details["moved_from"] == "local" and row.details["snapshot"] == snap.id
    assert sorted(p.name for p in snapshot_dir.iterdir()) == [snap.id]  # the copy is gone
