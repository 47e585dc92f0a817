"""The sync endpoints over HTTP on a live server (uvicorn, the real ASGI app) and real Docker:
manifest pages over 2,500 files, a tar upload keeping modes and mtimes, deletes, a streamed
download that round-trips byte for byte, refusals, and another team's 404s."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx2 as httpx
import pytest

from tenants.models import AuditLog
from tests.trees import extract, make_tree, snapshot, tar_of, walk

pytestmark = pytest.mark.docker


def http(asgi_server: str, world, key: str = "alice") -> httpx.Client:
    return httpx.Client(
        base_url=f"{asgi_server}/api/v1",
        headers={"Authorization": f"Bearer {world.keys[key]}"},
        timeout=120,
    )


def manifest(client: httpx.Client, sandbox: str, root: str, limit: int = 1000) -> list[dict]:
    entries: list[dict] = []
    after = None
    while True:
        params = {"path": root, "limit": str(limit)} | ({"after": after} if after else {})
        response = client.get(f"/sandboxes/{sandbox}/manifest/", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["exists"] is True
        entries += body["entries"]
        if body["next"] is None:
            return entries
        assert body["next"] == body["entries"][-1]["path"]
        after = body["next"]


def many_files(count: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for number in range(count):
            content = f"file {number}\n".encode()
            info = tarfile.TarInfo(f"d{number % 10}/f{number:05d}.txt")
            info.size, info.mode, info.mtime = len(content), 0o644, 1_600_000_000 + number
            archive.addfile(info, io.BytesIO(content))
    return out.getvalue()


def upload(client: httpx.Client, sandbox: str, root: str, data: bytes) -> httpx.Response:
    return client.post(
        f"/sandboxes/{sandbox}/sync/",
        params={"path": root},
        content=iter([data[at : at + 65536] for at in range(0, len(data), 65536)]),
        headers={"Content-Type": "application/x-tar"},
    )


def test_manifest_pages_over_2500_files_and_a_fast_resync(asgi_server, world, shared_sandbox):
    with http(asgi_server, world) as client:
        sent = upload(client, shared_sandbox, "many", many_files(2500))
        assert sent.status_code == 200, sent.text
        assert sent.json()["files"] == 2500
        entries = manifest(client, shared_sandbox, "many", limit=1000)
        paths = [entry["path"] for entry in entries]
        assert len(paths) == 2510 and paths == sorted(paths, key=str.encode)
        assert len(set(paths)) == len(paths)
        files = [entry for entry in entries if entry["kind"] == "file"]
        assert files[0] == {
            "path": "d0/f00000.txt",
            "kind": "file",
            "size": 7,
            "mtime": 1_600_000_000.0,
            "mode": 0o644,
        }
        # Its speed (a re-sync of an unchanged tree is this manifest) is bench/bench_sync.py's
        # to measure: a timed test fails on a busy machine without anything being wrong.


def test_upload_manifest_delete_download_round_trip(
    asgi_server, world, shared_sandbox, tmp_path: Path
):
    local = tmp_path / "local"
    files = make_tree(local)
    with http(asgi_server, world) as client:
        sent = upload(client, shared_sandbox, "/workspace/rt", tar_of(local))
        assert sent.json() == {
            "path": "/workspace/rt",
            "files": len(files),
            "bytes": sum(map(len, files.values())),
        }
        row = AuditLog.objects.filter(action="files.sync.upload").latest("id")
        assert row.details["files"] == len(files)

        entries = {entry["path"]: entry for entry in manifest(client, shared_sandbox, "rt")}
        assert list(entries) == walk(local)
        assert entries["run.sh"]["mode"] == 0o750
        assert entries["link"] == entries["link"] | {"kind": "link", "target": "a/b.py"}
        assert "target" not in entries["run.sh"]
        mtime = (local / "a-x").stat().st_mtime
        assert entries["a-x"]["mtime"] == pytest.approx(mtime, abs=1e-6)

        with client.stream(
            "POST",
            f"/sandboxes/{shared_sandbox}/sync/download/",
            json={"path": "rt", "paths": walk(local)},
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/x-tar"
            data = b"".join(response.iter_bytes())
        extract(data, tmp_path / "back")
        assert snapshot(tmp_path / "back") == snapshot(local)

        gone = client.post(
            f"/sandboxes/{shared_sandbox}/sync/delete/",
            json={"path": "rt", "paths": ["a", "run.sh", "never-there"]},
        )
        assert gone.status_code == 200 and gone.json()["deleted"] == 2
        left = [entry["path"] for entry in manifest(client, shared_sandbox, "rt")]
        assert "run.sh" not in left and "a/b.py" not in left and "a-x" in left


def test_refusals_and_another_team(asgi_server, world, shared_sandbox, settings):
    base = f"/sandboxes/{shared_sandbox}"
    with http(asgi_server, world) as client:
        cases = [
            client.get(f"{base}/manifest/", params={"path": "/etc"}),
            client.get(f"{base}/manifest/", params={"path": "rt", "limit": "5001"}),
            client.post(f"{base}/sync/delete/", json={"path": "rt", "paths": ["../x"]}),
            client.post(f"{base}/sync/delete/", json={"path": "rt", "paths": ["/etc/passwd"]}),
            client.post(f"{base}/sync/download/", json={"path": "rt", "paths": ["a/../../x"]}),
            client.post(f"{base}/sync/download/", json={"path": "/", "paths": ["etc/passwd"]}),
            upload(client, shared_sandbox, "rt", b"not a tar" * 100),
        ]
        for response in cases:
            assert response.status_code == 400, response.text
            assert set(response.json()) >= {"detail"}
        escaping = io.BytesIO()
        with tarfile.open(fileobj=escaping, mode="w") as archive:
            info = tarfile.TarInfo("../escape.txt")
            archive.addfile(info, io.BytesIO(b""))
        refused = upload(client, shared_sandbox, "rt", escaping.getvalue())
        assert refused.status_code == 400 and refused.json()["code"] == "invalid"
        a_file = upload(client, shared_sandbox, "rt", many_files(1))
        assert a_file.status_code == 200
        not_a_dir = client.get(f"{base}/manifest/", params={"path": "rt/d0/f00000.txt"})
        assert not_a_dir.status_code == 400
        missing = client.get(f"{base}/manifest/", params={"path": "nowhere"})
        assert missing.json() == {
            "path": "/workspace/nowhere",
            "exists": False,
            "entries": [],
            "next": None,
        }
        settings.SANDHUB_MAX_TRANSFER_BYTES = 10_000
        too_big = upload(client, shared_sandbox, "rt", many_files(100))
        assert too_big.status_code == 413 and too_big.json()["code"] == "too_large"

    with http(asgi_server, world, "bob") as other:
        answers = [
            other.get(f"{base}/manifest/", params={"path": "rt"}),
            upload(other, shared_sandbox, "rt", many_files(1)),
            other.post(f"{base}/sync/delete/", json={"path": "rt", "paths": ["d0"]}),
            other.post(f"{base}/sync/download/", json={"path": "rt", "paths": ["d0"]}),
        ]
    assert [answer.status_code for answer in answers] == [404] * 4
