"""The disk image copy (hosts/backends/docker/sparsecopy.py) on this machine's filesystem:
the bytes, the holes, the size, the mode; and nothing left behind when it fails."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from hosts.backends.base import BackendError
from hosts.backends.docker import sparsecopy
from hosts.backends.docker.snapshot_store import copy_sparse

MB = 1024 * 1024


def sparse_image(path: Path) -> dict[int, bytes]:
    """A 200 MB file of which three ranges are written (one across a chunk boundary), the
    rest holes, ending in a hole."""
    written = {
        0: b"start" * 1000,
        sparsecopy.CHUNK - 4096: os.urandom(3 * MB),
        150 * MB: os.urandom(MB + 17),
    }
    with open(path, "wb") as handle:
        for offset, data in written.items():
            handle.seek(offset)
            handle.write(data)
        handle.truncate(200 * MB)
    return written


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_the_copy_holds_the_same_bytes_keeps_the_holes_and_is_private(tmp_path):
    source, target = tmp_path / "disk.img", tmp_path / "copy.img"
    written = sparse_image(source)
    os.umask(0o022)
    copy_sparse(source, target)
    assert target.stat().st_size == source.stat().st_size == 200 * MB
    assert target.read_bytes() == source.read_bytes()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    data = sum(len(chunk) for chunk in written.values())
    # Holes stay holes (a reflink shares blocks instead: nothing new allocated either way).
    assert allocated(target) < data + 8 * MB, allocated(target)


def test_a_file_of_holes_only_copies_as_one(tmp_path):
    source, target = tmp_path / "empty.img", tmp_path / "copy.img"
    with open(source, "wb") as handle:
        handle.truncate(64 * MB)
    copy_sparse(source, target)
    assert target.stat().st_size == 64 * MB
    assert allocated(target) < MB


def in_kernel_copy_failing(monkeypatch: pytest.MonkeyPatch, code: int, message: str) -> None:
    """No reflink here, and copy_file_range failing with `code` on every call."""

    def failing(*args: object) -> int:
        raise OSError(code, message)

    monkeypatch.setattr(sparsecopy, "_reflinked", lambda source, target: False)
    monkeypatch.setattr(sparsecopy.os, "copy_file_range", failing)


def test_a_failed_copy_leaves_no_target_and_says_why(tmp_path, monkeypatch):
    source, target = tmp_path / "disk.img", tmp_path / "copy.img"
    sparse_image(source)
    in_kernel_copy_failing(monkeypatch, errno.ENOSPC, "No space left on device")
    with pytest.raises(BackendError, match="No space left on device"):
        copy_sparse(source, target)
    assert not target.exists()


def test_an_existing_target_is_never_overwritten(tmp_path):
    source, target = tmp_path / "disk.img", tmp_path / "copy.img"
    sparse_image(source)
    target.write_bytes(b"someone else's")
    with pytest.raises(BackendError):
        copy_sparse(source, target)
    assert target.read_bytes() == b"someone else's"


def test_where_the_kernel_refuses_to_copy_the_bytes_go_through_the_process(tmp_path, monkeypatch):
    """copy_file_range between filesystems of two kinds is EXDEV on recent kernels."""
    source, target = tmp_path / "disk.img", tmp_path / "copy.img"
    sparse_image(source)
    in_kernel_copy_failing(monkeypatch, errno.EXDEV, "Invalid cross-device link")
    copy_sparse(source, target)
    assert target.read_bytes() == source.read_bytes()
    assert allocated(target) < 8 * MB + 8 * MB
