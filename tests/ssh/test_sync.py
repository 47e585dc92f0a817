"""Tree sync on SSH hosts against a real sshd on loopback: the services end to end on a
pinned host (the agent path, a Unix user per sandbox), and the backend on a host without
python3 for the agent (the plain path: the shared scripts over exec channels)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.ssh.backend import SshBackend
from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NotFound
from tenants.models import AuditLog
from tests.trees import ROOT, extract, make_tree, snapshot, tar_of, walk

pytestmark = pytest.mark.sshd


def download(stream: Any) -> bytes:
    try:
        return b"".join(stream)
    finally:
        stream.close()


@pytest.mark.django_db(transaction=True)
def test_sync_through_the_services_on_an_ssh_host(pinned, as_alice, as_bob, tmp_path: Path):
    local = tmp_path / "local"
    files = make_tree(local)
    sandbox_id = services.create_sandbox(as_alice).id
    try:
        assert services.tree_manifest(as_alice, sandbox_id, "proj").exists is False
        sent = services.sync_upload(as_alice, sandbox_id, "proj", io.BytesIO(tar_of(local)))
        assert (sent.path, sent.files) == (ROOT, len(files))
        row = AuditLog.objects.filter(action="files.sync.upload").latest("id")
        assert row.details["files"] == len(files)

        entries, after = [], None
        while True:  # pages of 4
            page = services.tree_manifest(as_alice, sandbox_id, "proj", after=after, limit=4)
            entries += page.entries
            if page.next is None:
                break
            after = page.next
        assert [e.path for e in entries] == walk(local)
        by_path = {e.path: e for e in entries}
        assert by_path["run.sh"].mode == 0o750 and by_path["link"].target == "a/b.py"

        back = tmp_path / "back"
        extract(
            download(services.open_sync_download(as_alice, sandbox_id, "proj", walk(local))), back
        )
        assert snapshot(back) == snapshot(local)

        services.run_command(as_alice, sandbox_id, "mkdir -p outside && echo k > outside/keep")
        services.run_command(as_alice, sandbox_id, "ln -s ../outside proj/escape")
        gone = services.sync_delete(as_alice, sandbox_id, "proj", ["a", "link", "escape/keep"])
        assert gone.deleted == 2
        assert services.read_file(as_alice, sandbox_id, "outside/keep").content == b"k\n"
        with pytest.raises(InvalidInput):
            services.sync_delete(as_alice, sandbox_id, "proj", ["../outside/keep"])
        with pytest.raises(NotFound):
            services.tree_manifest(as_bob, sandbox_id, "proj")
    finally:
        services.delete_sandbox(as_alice, sandbox_id)


def test_sync_without_python3_goes_the_plain_way(
    plain_backend: SshBackend, sandbox: dict[str, Any], tmp_path: Path
) -> None:
    backend = plain_backend
    # The fixture's agent link looks for a python that is missing: sync uses it too.
    local = tmp_path / "local"
    make_tree(local)
    assert backend.manifest(sandbox, ROOT, after=None, limit=10).exists is False
    backend.put_files(sandbox, ROOT, tar_of(local))
    first = backend.manifest(sandbox, ROOT, after=None, limit=5)
    rest = backend.manifest(sandbox, ROOT, after=first.next, limit=100)
    assert [e.path for e in first.entries + rest.entries] == walk(local)
    assert rest.next is None
    modes = {e.path: e.mode for e in first.entries + rest.entries}
    assert modes["run.sh"] == 0o750 and modes["a.txt"] == 0o600

    back = tmp_path / "back"
    extract(download(backend.get_entries(sandbox, ROOT, walk(local))), back)
    assert snapshot(back) == snapshot(local)

    assert backend.delete_entries(sandbox, ROOT, ["a", "link", "missing", "../x"]) == 2
    left = [e.path for e in backend.manifest(sandbox, ROOT, after=None, limit=100).entries]
    assert "a" not in left and "link" not in left and "a-x" in left
    with pytest.raises(NotADirectoryError):
        backend.manifest(sandbox, ROOT + "/a.txt", after=None, limit=10)
