"""Incremental sync of a local directory with a directory in a sandbox, both ways.

Both sides are compared as flat maps (tree.py): the local walk, and the platform's manifest
(paged, up to 5,000 entries a request). What differs in size, mtime or permissions goes over
in ONE tar stream (tarstream.py); with `delete`, what only the destination has is removed.
The ignore rules come from the source side (local .gitignore files on push, the sandbox's on
pull) and apply to both, so an ignored `.venv` on the destination is never deleted.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sandhub.api import MAX_PATHS_PER_CALL, Platform
from sandhub.progress import TransferProgress
from sandhub.tarstream import (
    ChunkReader,
    TransferError,
    ensure_parents,
    extract,
    make_dir,
    tar_chunks,
)
from sandhub.tree import DIR, FILE, GITIGNORE, Entry, Plan, Rules, kept, plan, walk_local

MAX_GITIGNORE_BYTES = 1024 * 1024  # a sandbox's .gitignore larger than this is not read
# The platform moves at most SANDHUB_MAX_TRANSFER_BYTES (100 MiB by default) per call: a
# larger sync goes as several tars of about this much each (a single file can't be split).
BATCH_BYTES = 64 * 1024 * 1024
ENTRY_OVERHEAD = 3 * 512  # a member's header, PAX record and padding, at most (about)


class SyncError(TransferError):
    """A sync refused before it started (a missing directory, a file where a dir should be)."""


@dataclass
class SyncReport:
    sent: list[str]  # paths sent (directories end in "/"); with dry_run: would be sent
    deleted: list[str]  # extras removed (outermost only); with dry_run: would be removed
    unchanged: int  # files and links already equal on both sides
    bytes: int  # content bytes sent


def push(
    platform: Platform,
    local_dir: str | os.PathLike[str],
    sandbox_id: str,
    remote_path: str,
    *,
    excludes: Sequence[str] = (),
    gitignore: bool = True,
    delete: bool = False,
    dry_run: bool = False,
    progress: TransferProgress | None = None,
) -> SyncReport:
    """Make `remote_path` in the sandbox hold what `local_dir` holds."""
    root = Path(local_dir)
    if not root.is_dir():
        raise SyncError(f"{local_dir} is not a directory")
    rules = Rules(excludes, gitignore=gitignore)
    local = walk_local(root, rules)
    manifest = platform.manifest(sandbox_id, remote_path)
    remote = kept((Entry.from_manifest(item) for item in manifest.entries), rules)
    steps = plan(local, remote)
    report = _report(steps, delete)
    if dry_run:
        return report
    if steps.replace:
        platform.sync_delete(sandbox_id, remote_path, steps.replace)
    if steps.send:
        on_bytes = None
        if progress is not None:
            progress.start(f"sync to {sandbox_id}", steps.send_bytes)
            on_bytes = progress.advance
        try:
            for batch in batches(steps.send):
                platform.sync_upload(
                    sandbox_id, remote_path, tar_chunks(root, batch, on_bytes=on_bytes)
                )
        finally:
            if progress is not None:
                progress.finish()
    if delete and steps.extras:
        platform.sync_delete(sandbox_id, remote_path, steps.extras)
    return report


def pull(
    platform: Platform,
    sandbox_id: str,
    remote_path: str,
    local_dir: str | os.PathLike[str],
    *,
    excludes: Sequence[str] = (),
    gitignore: bool = True,
    delete: bool = False,
    dry_run: bool = False,
    progress: TransferProgress | None = None,
) -> SyncReport:
    """Make `local_dir` hold what `remote_path` in the sandbox holds."""
    root = Path(local_dir)
    if root.exists() and not root.is_dir():
        raise SyncError(f"{local_dir} is not a directory")
    manifest = platform.manifest(sandbox_id, remote_path)
    if not manifest.exists:
        raise SyncError(f"{remote_path} does not exist in sandbox {sandbox_id}")
    rules = Rules(excludes, gitignore=gitignore)
    entries = [Entry.from_manifest(item) for item in manifest.entries]
    if gitignore:
        _read_remote_gitignores(platform, sandbox_id, remote_path, entries, rules)
    remote = kept(entries, rules)
    local = walk_local(root, rules, read_gitignore=False) if root.is_dir() else {}
    steps = plan(remote, local)
    report = _report(steps, delete)
    if dry_run:
        return report
    root.mkdir(parents=True, exist_ok=True)
    for path in steps.replace:
        _remove_local(root, path)
    directories = [entry for entry in steps.send if entry.kind == DIR]
    for entry in directories:  # parents first (path order); writable until filled
        ensure_parents(root, entry.path)
        make_dir(os.path.join(root, entry.path), entry.mode | 0o700)
    wanted = [entry for entry in steps.send if entry.kind != DIR]
    if wanted:
        _download(platform, sandbox_id, remote_path, root, wanted, progress)
    for entry in reversed(directories):  # children first: their changes touch the parent
        path = os.path.join(root, entry.path)
        os.chmod(path, entry.mode & 0o7777)
        os.utime(path, ns=(entry.mtime_ns, entry.mtime_ns))
    if delete:
        for path in steps.extras:
            _remove_local(root, path)
    return report


def batches(entries: list[Entry]) -> Iterator[list[Entry]]:
    """Entries in order, cut into runs of at most BATCH_BYTES of tar and MAX_PATHS_PER_CALL
    names: one run, one tar, for all but big trees."""
    batch: list[Entry] = []
    size = 0
    for entry in entries:
        cost = entry.size + ENTRY_OVERHEAD
        if batch and (size + cost > BATCH_BYTES or len(batch) >= MAX_PATHS_PER_CALL):
            yield batch
            batch, size = [], 0
        batch.append(entry)
        size += cost
    if batch:
        yield batch


def _report(steps: Plan, delete: bool) -> SyncReport:
    return SyncReport(
        sent=[entry.path + ("/" if entry.kind == DIR else "") for entry in steps.send],
        deleted=list(steps.extras) if delete else [],
        unchanged=steps.unchanged,
        bytes=steps.send_bytes,
    )


def _download(
    platform: Platform,
    sandbox_id: str,
    remote_path: str,
    root: Path,
    entries: list[Entry],
    progress: TransferProgress | None,
) -> None:
    on_bytes = None
    if progress is not None:
        progress.start(f"sync from {sandbox_id}", sum(entry.size for entry in entries))
        on_bytes = progress.advance
    try:
        for batch in batches(entries):
            wanted = {entry.path: entry for entry in batch}
            with platform.sync_download(sandbox_id, remote_path, list(wanted)) as chunks:
                extract(chunks, root, wanted, on_bytes=on_bytes)
    finally:
        if progress is not None:
            progress.finish()


def _read_remote_gitignores(
    platform: Platform, sandbox_id: str, remote_path: str, entries: list[Entry], rules: Rules
) -> None:
    """The sandbox's .gitignore files, fetched in one small tar, into `rules`."""
    paths = [
        entry.path
        for entry in entries
        if entry.kind == FILE
        and posixpath.basename(entry.path) == GITIGNORE
        and entry.size <= MAX_GITIGNORE_BYTES
    ][:MAX_PATHS_PER_CALL]
    if not paths:
        return
    with (
        platform.sync_download(sandbox_id, remote_path, paths) as chunks,
        tarfile.open(fileobj=ChunkReader(chunks), mode="r|") as archive,
    ):
        for member in archive:
            source = archive.extractfile(member) if member.isfile() else None
            if source is None:
                continue
            directory = posixpath.dirname(member.name.removeprefix("./"))
            text = source.read(MAX_GITIGNORE_BYTES).decode("utf-8", errors="replace")
            rules.add_gitignore(directory, text)


def _remove_local(root: Path, path: str) -> None:
    """Remove a file, link or whole directory under root (a link is removed, not followed)."""
    target = os.path.join(root, path)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(target)
    else:
        os.unlink(target)
