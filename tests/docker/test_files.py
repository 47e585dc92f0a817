"""DockerBackend's files against the real engine and the real sandbox image: tar uploads and
downloads, ownership, refusals, tmpfs, missing paths and listings. Fixtures:
tests/docker/conftest.py."""

from __future__ import annotations

import io
import os
import tarfile
import time
from typing import Any

import pytest

from hosts.backends.base import BackendError
from hosts.backends.docker import DockerBackend
from tests.docker.helpers import make_tar, read_tar, run


def test_upload_download_round_trip(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    files = {
        "a.txt": (b"hello\n", 0o644),
        "sub/dir/blob.bin": (os.urandom(300_000) + bytes(range(256)), 0o600),
        "run.sh": (b"#!/bin/sh\necho ran\n", 0o755),
        "empty": (b"", 0o644),
    }
    backend.put_files(sandbox, "/workspace/up/load", make_tar(files))
    downloaded = read_tar(backend.get_files(sandbox, "/workspace/up/load"))
    assert downloaded == {f"load/{name}": content for name, (content, _) in files.items()}
    result = run(
        backend,
        sandbox,
        "./up/load/run.sh && stat -c '%u:%g %a %n' up/load/a.txt up/load/sub "
        "&& echo more >> up/load/a.txt && echo appended",
    )
    assert result.exit_code == 0, result
    lines = result.stdout.decode()
    assert "ran\n" in lines and "appended" in lines
    assert "99999:99999 644 up/load/a.txt" in lines
    assert "99999:99999" in lines.splitlines()[2]  # the implicit parent directory too


def test_root_owned_archive_becomes_the_sandbox_users(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    archive = make_tar({"root.txt": (b"r", 0o4755)}, uid=0)
    backend.put_files(sandbox, "/workspace", archive)
    result = run(backend, sandbox, "stat -c '%u:%g %a' root.txt && echo w >> root.txt")
    assert result.exit_code == 0, result
    assert result.stdout == b"99999:99999 755\n"


def test_upload_refuses_device_nodes(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("null")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        archive.addfile(info)
    with pytest.raises(BackendError, match="not a file"):
        backend.put_files(sandbox, "/workspace", buffer.getvalue())


def test_upload_outside_workspace_is_a_clear_error(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    archive = make_tar({"a": (b"a", 0o644)})
    for place in ("/tmp", "/usr/local/x", "/workspace/../etc"):
        with pytest.raises(BackendError, match="only be uploaded under /workspace"):
            backend.put_files(sandbox, place, archive)
    run(backend, sandbox, "mkdir /workspace/locked && chmod 555 /workspace/locked")
    with pytest.raises(BackendError, match="cannot create directory /workspace/locked/x"):
        backend.put_files(sandbox, "/workspace/locked/x", archive)


def test_download_from_tmpfs(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    # The engine's get_archive cannot see tmpfs mounts; the backend falls back to tar inside.
    run(
        backend,
        sandbox,
        "mkdir -p /tmp/out/d && printf one > /tmp/out/1 && printf two > "
        "/tmp/out/d/2 && printf home > ~/h",
    )
    assert read_tar(backend.get_files(sandbox, "/tmp/out")) == {"out/1": b"one", "out/d/2": b"two"}
    assert read_tar(backend.get_files(sandbox, "/home/sandbox/h")) == {"h": b"home"}
    with pytest.raises(FileNotFoundError):
        backend.get_files(sandbox, "/tmp/missing")


def test_missing_paths(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    with pytest.raises(FileNotFoundError):
        list(backend.get_files(sandbox, "/workspace/nope"))
    with pytest.raises(FileNotFoundError):
        backend.list_dir(sandbox, "/workspace/nope")


def test_list_dir(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = run(
        backend,
        sandbox,
        "mkdir -p d/sub && printf 12345 > d/five && ln -s five d/link && chmod 640 d/five "
        "&& touch d/$'\\xff'raw d/'new\nline'",
    )
    assert result.exit_code == 0, result
    entries = {e.name: e for e in backend.list_dir(sandbox, "/workspace/d")}
    assert set(entries) == {"sub", "five", "link", "\\xffraw", "new\nline"}
    assert entries["sub"].kind == "dir"
    assert entries["five"].kind == "file" and entries["five"].size == 5
    assert entries["five"].mode == "640" and entries["five"].path == "/workspace/d/five"
    assert entries["link"].kind == "link"
    assert abs(entries["five"].mtime - time.time()) < 120
    (single,) = backend.list_dir(sandbox, "/workspace/d/five")
    assert single.name == "five" and single.size == 5
    assert backend.list_dir(sandbox, "/workspace/d/sub") == []
