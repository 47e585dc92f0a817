"""Tree sync services on the real Docker engine: manifest, tar upload, delete, download.

Every test runs with the sandbox agent and without it (SANDHUB_AGENT=false: the per-command
scripts); an image without python3 is covered at the backend level (tests/docker/test_sync.py).
Trees are made on this machine (tests/trees.py), sent as a tar, and compared back byte for
byte, with modes and nanosecond mtimes.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NotFound
from sandboxes.models import Sandbox
from tenants.models import AuditLog
from tests.trees import ROOT, extract, make_tree, snapshot, tar_of, walk

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


def all_entries(principal, sandbox_id: str, root: str, limit: int = 1000) -> list[Any]:
    entries, after = [], None
    while True:
        page = services.tree_manifest(principal, sandbox_id, root, after=after, limit=limit)
        entries += page.entries
        if page.next is None:
            return entries
        after = page.next


# --- fixtures ------------------------------------------------------------------------------
@pytest.fixture(params=["agent", "plain"])
def agent_mode(request, settings) -> str:
    settings.SANDHUB_AGENT = request.param == "agent"
    return str(request.param)


@pytest.fixture
def sandbox(real_docker, as_alice, agent_mode) -> Iterator[str]:
    info = services.create_sandbox(as_alice, memory_mb=256)
    yield info.id
    if Sandbox.objects.get(public_id=info.id).status != "deleted":
        services.delete_sandbox(as_alice, info.id)


# --- tests ---------------------------------------------------------------------------------
def test_a_missing_root_is_an_empty_manifest_and_a_file_is_refused(as_alice, sandbox) -> None:
    page = services.tree_manifest(as_alice, sandbox, "proj")
    assert (page.path, page.exists, page.entries, page.next) == (ROOT, False, [], None)
    services.write_file(as_alice, sandbox, "proj/file", "x")
    with pytest.raises(InvalidInput, match="not a directory"):
        services.tree_manifest(as_alice, sandbox, "proj/file")
    with pytest.raises(InvalidInput, match="inside /workspace"):
        services.tree_manifest(as_alice, sandbox, "/etc")


def test_upload_then_manifest_then_download_round_trips_exactly(
    as_alice, sandbox, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    files = make_tree(local)
    result = services.sync_upload(as_alice, sandbox, "proj", io.BytesIO(tar_of(local)))
    assert (result.path, result.files) == (ROOT, len(files))
    assert result.bytes == sum(len(content) for content in files.values())
    row = AuditLog.objects.filter(action="files.sync.upload").latest("id")
    assert row.details["files"] == len(files) and row.outcome == "ok"

    entries = all_entries(as_alice, sandbox, "proj", limit=3)  # pages of 3
    assert [e.path for e in entries] == walk(local)
    by_path = {e.path: e for e in entries}
    assert by_path["run.sh"].mode == 0o750 and by_path["a.txt"].mode == 0o600
    assert by_path["link"].kind == "link" and by_path["link"].target == "a/b.py"
    assert by_path["a"].kind == "dir" and by_path["a/deep/c.bin"].size == 256 * 300
    for name in files:
        assert by_path[name].mtime == pytest.approx((local / name).stat().st_mtime, abs=1e-6)

    stream = services.open_sync_download(as_alice, sandbox, "proj", walk(local))
    try:
        data = b"".join(stream)
    finally:
        stream.close()
    back = tmp_path / "back"
    extract(data, back)
    assert snapshot(back) == snapshot(local)


def test_delete_removes_entries_under_the_root_only(as_alice, sandbox, tmp_path: Path) -> None:
    local = tmp_path / "local"
    make_tree(local)
    services.sync_upload(as_alice, sandbox, "proj", io.BytesIO(tar_of(local)))
    services.write_file(as_alice, sandbox, "outside/keep.txt", "keep")
    services.run_command(as_alice, sandbox, "ln -s /workspace/outside proj/escape")

    result = services.sync_delete(
        as_alice, sandbox, "proj", ["a.txt", "a", "link", "escape/keep.txt", "absent"]
    )
    assert result.deleted == 3  # a.txt, a (with its content), link; not through escape
    names = [e.path for e in all_entries(as_alice, sandbox, "proj")]
    assert "a.txt" not in names and "a/b.py" not in names and "link" not in names
    assert "a-x" in names and "escape" in names
    assert services.read_file(as_alice, sandbox, "outside/keep.txt").content == b"keep"
    for bad in (["../outside/keep.txt"], ["/workspace/outside"], ["a/../.."], ["."], [""]):
        with pytest.raises(InvalidInput):
            services.sync_delete(as_alice, sandbox, "proj", bad)
    row = AuditLog.objects.filter(action="files.sync.delete", outcome="ok").latest("id")
    assert row.details["deleted"] == 3


def test_upload_refuses_what_a_sync_never_sends(as_alice, sandbox, settings) -> None:
    def archive(*members: tarfile.TarInfo) -> io.BytesIO:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for member in members:
                tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
        out.seek(0)
        return out

    climbing = tarfile.TarInfo("../up.txt")
    climbing.size = 1
    device = tarfile.TarInfo("dev")
    device.type = tarfile.CHRTYPE
    hard = tarfile.TarInfo("hard")
    hard.type, hard.linkname = tarfile.LNKTYPE, "x"
    link = tarfile.TarInfo("out")
    link.type, link.linkname = tarfile.SYMTYPE, "/tmp"
    through = tarfile.TarInfo("out/x.txt")
    through.size = 1
    for bad in ([climbing], [device], [hard], [link, through]):
        with pytest.raises(InvalidInput):
            services.sync_upload(as_alice, sandbox, "proj", archive(*bad))
    with pytest.raises(InvalidInput, match="not a valid tar"):
        services.sync_upload(as_alice, sandbox, "proj", io.BytesIO(b"not a tar" * 200))
    settings.SANDHUB_MAX_TRANSFER_BYTES = 4096
    big = tarfile.TarInfo("big")
    big.size = 10_000
    with pytest.raises(services.TooLarge):
        services.sync_upload(as_alice, sandbox, "proj", archive(big))
    assert services.tree_manifest(as_alice, sandbox, "proj").exists is False


def test_a_link_where_a_directory_goes_refuses_the_whole_upload_before_a_write(
    as_alice, sandbox
) -> None:
    """The sandbox's checks run in the same exec as tar -x, before it: a good member ahead
    of one under an existing link is not written either."""
    services.run_command(as_alice, sandbox, "mkdir -p proj && ln -s /tmp proj/out")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in ("first.txt", "out/x.txt"):
            info = tarfile.TarInfo(name)
            info.size = 1
            archive.addfile(info, io.BytesIO(b"x"))
    out.seek(0)
    with pytest.raises(InvalidInput, match="symbolic link"):
        services.sync_upload(as_alice, sandbox, "proj", out)
    assert [e.path for e in all_entries(as_alice, sandbox, "proj")] == ["out"]
    listed = services.run_command(as_alice, sandbox, "ls /tmp")
    assert "x.txt" not in listed.stdout


def test_the_scan_plans_the_archive_for_the_backend_in_the_same_pass(tmp_path: Path) -> None:
    from hosts.backends import archives
    from sandboxes.services.synctar import scan_upload

    make_tree(tmp_path)
    source = io.BytesIO(tar_of(tmp_path))
    scan = scan_upload(source)
    assert scan.planned is not None and source.tell() == 0
    again = archives.plan(io.BytesIO(source.getvalue()))
    assert [m.header for m in scan.planned.plan.members] == [m.header for m in again.members]
    assert (scan.planned.plan.total, scan.planned.plan.directories) == (
        again.total,
        again.directories,
    )
    sent = b"".join(archives.chunks(source, scan.planned.plan))
    assert len(sent) == again.total
    with tarfile.open(fileobj=io.BytesIO(sent)) as archive:
        assert [m.name for m in archive] == scan.paths


def test_another_team_sees_nothing(as_alice, as_bob, sandbox) -> None:
    services.write_file(as_alice, sandbox, "proj/secret", "s")
    with pytest.raises(NotFound):
        services.tree_manifest(as_bob, sandbox, "proj")
    with pytest.raises(NotFound):
        services.sync_delete(as_bob, sandbox, "proj", ["secret"])
    with pytest.raises(NotFound):
        services.open_sync_download(as_bob, sandbox, "proj", ["secret"])
    with pytest.raises(NotFound):
        services.sync_upload(as_bob, sandbox, "proj", io.BytesIO(b""))
    assert services.read_file(as_alice, sandbox, "proj/secret").content == b"s"
