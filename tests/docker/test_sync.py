"""Tree sync on a Docker sandbox whose image has no python3, so no agent: manifest, upload,
delete and download through the backend's per-command scripts. The services, with the agent and
without it, are tested in tests/services/test_sync.py (this test was part of it)."""

from __future__ import annotations

from pathlib import Path

from hosts.backends.docker import DockerBackend
from tests.docker.helpers import make_spec
from tests.trees import ROOT, extract, make_tree, snapshot, tar_of, walk


def test_an_image_without_python3_syncs_through_the_scripts(
    backend: DockerBackend,
    no_python_image: str,
    tmp_path: Path,
) -> None:
    local = tmp_path / "local"
    make_tree(local)
    state = backend.provision(make_spec(image_reference=no_python_image))
    try:
        assert backend.manifest(state, ROOT, after=None, limit=10).exists is False
        backend.put_files(state, ROOT, tar_of(local))
        first = backend.manifest(state, ROOT, after=None, limit=4)
        second = backend.manifest(state, ROOT, after=first.next, limit=100)
        assert [e.path for e in first.entries + second.entries] == walk(local)
        assert second.next is None
        assert backend.delete_entries(state, ROOT, ["a", "link", "nothing"]) == 2
        left = [e.path for e in backend.manifest(state, ROOT, after=None, limit=100).entries]
        assert left == [
            n for n in walk(local) if n != "link" and not n.startswith("a/") and n != "a"
        ]
        stream = backend.get_entries(state, ROOT, left)
        try:
            data = b"".join(stream)
        finally:
            stream.close()
        back = tmp_path / "back"
        extract(data, back)
        expected = {k: v for k, v in snapshot(local).items() if k in left}
        assert snapshot(back) == expected
    finally:
        backend.destroy(state)
