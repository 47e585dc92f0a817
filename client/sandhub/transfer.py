"""`sandhub cp`: one file or a whole directory, either way, with `cp -r`'s naming (into an
existing directory under the source's name, else as the destination itself).

Files travel in the sync endpoints' tar streams (even a single one), so modes and mtimes are
kept as with sync; directories are a sync without deletions and without .gitignore rules.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path

from sandhub.api import ApiError, Platform
from sandhub.progress import TransferProgress
from sandhub.sync import SyncError, pull, push
from sandhub.tarstream import ChunkReader, TransferError, member_time_ns, place_file, tar_chunks
from sandhub.tree import FILE, PERMISSION_BITS, Entry

WORKSPACE = "/workspace"  # sync roots must be inside it; elsewhere files go one by one


def in_workspace(remote: str) -> bool:
    full = posixpath.normpath(posixpath.join(WORKSPACE, remote))
    return full == WORKSPACE or full.startswith(WORKSPACE + "/")


def remote_kind(platform: Platform, sandbox_id: str, path: str) -> str | None:
    """Whether `path` is a "dir", a "file" or None (nothing there): one manifest request."""
    try:
        page = platform.manifest_page(sandbox_id, path, limit=1)
    except ApiError as exc:
        if exc.status == 400:  # the manifest of a file is refused
            return "file"
        raise
    return "dir" if page.get("exists", True) else None


def upload(
    platform: Platform,
    local: Path,
    sandbox_id: str,
    remote: str,
    *,
    excludes: Sequence[str] = (),
    progress: TransferProgress | None = None,
) -> str:
    """Copy a local file or directory into the sandbox; returns where it went."""
    if not local.exists():
        raise SyncError(f"{local}: no such file or directory")
    kind = remote_kind(platform, sandbox_id, remote)
    if kind == "dir" or (kind is None and remote.endswith("/")):
        remote = posixpath.join(remote, local.resolve().name)
    remote = remote.rstrip("/") or "/"
    if local.is_dir():
        push(
            platform,
            local,
            sandbox_id,
            remote,
            excludes=excludes,
            gitignore=False,
            progress=progress,
        )
        return remote
    info = local.stat()
    if not stat.S_ISREG(info.st_mode):
        raise SyncError(f"{local} is not a regular file or a directory")
    if not in_workspace(remote):  # the files API: no mode or mtime, but any writable place
        with local.open("rb") as handle:
            platform.upload_file(sandbox_id, remote, handle)
        return remote
    parent, name = posixpath.split(remote)
    entry = Entry(name, FILE, info.st_size, info.st_mtime_ns, stat.S_IMODE(info.st_mode))
    on_bytes = None
    if progress is not None:
        progress.start(f"cp to {sandbox_id}", info.st_size)
        on_bytes = progress.advance
    try:
        chunks = tar_chunks(local.parent, [entry], on_bytes, sources={name: os.fspath(local)})
        platform.sync_upload(sandbox_id, parent or ".", chunks)
    finally:
        if progress is not None:
            progress.finish()
    return remote


def download(
    platform: Platform,
    sandbox_id: str,
    remote: str,
    local: Path,
    *,
    excludes: Sequence[str] = (),
    progress: TransferProgress | None = None,
) -> Path:
    """Copy a file or directory out of the sandbox; returns where it went."""
    # `a/..` names a/'s parent: the local name must come from the normalised path, or
    # `cp SB:.. DIR` would write beside DIR rather than into it.
    remote = posixpath.normpath(remote) if remote else remote
    kind = remote_kind(platform, sandbox_id, remote)
    if kind is None:
        raise SyncError(f"{remote}: no such file or directory in sandbox {sandbox_id}")
    name = posixpath.basename(remote.rstrip("/"))
    if name in ("", ".", ".."):
        name = "root"
    if local.is_dir():
        local = local / name
    if kind == "dir":
        pull(
            platform,
            sandbox_id,
            remote,
            local,
            excludes=excludes,
            gitignore=False,
            progress=progress,
        )
        return local
    if not local.parent.is_dir():
        raise SyncError(f"{local.parent} is not a directory")
    if not in_workspace(remote):
        with platform.download_file(sandbox_id, remote) as chunks:
            place_file(os.fspath(local), ChunkReader(chunks), 0o644, time.time_ns(), None)
        return local
    parent = posixpath.dirname(remote.rstrip("/")) or "/"
    if progress is not None:
        progress.start(f"cp from {sandbox_id}", 0)
    try:
        with (
            platform.sync_download(sandbox_id, parent, [name]) as chunks,
            tarfile.open(fileobj=ChunkReader(chunks), mode="r|") as archive,
        ):
            for member in archive:
                source = archive.extractfile(member) if member.isfile() else None
                if source is None:
                    continue
                mode, mtime_ns = member.mode & PERMISSION_BITS, member_time_ns(member)
                on_bytes = progress.advance if progress is not None else None
                place_file(os.fspath(local), source, mode, mtime_ns, on_bytes)
                return local
    finally:
        if progress is not None:
            progress.finish()
    raise TransferError(f"{remote} is not a regular file")
