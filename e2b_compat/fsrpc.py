"""envd's filesystem RPCs on Sandhub's file services: stat, list (to a depth), make a
folder, move, remove, and watching a folder (a stream, or a watcher polled by id).

Watching is done by looking: the folder is listed every WATCH_EVERY seconds and the
differences become E2B's events (create, write, remove). Changes between two looks that
cancel out are not seen, and a rename shows as a remove and a create.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import secrets
import stat as statmodule
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from e2b_compat.auth import Caller
from e2b_compat.connect import ConnectError
from e2b_compat.proto import filesystem_pb2 as fs
from sandboxes import services
from sandboxes.contract.errors import Conflict, NotFound
from sandboxes.contract.results import FileEntry
from sandboxes.http.dbthreads import in_db_thread
from sandboxes.policy import validation

__all__ = ["KEEPALIVES", "ROUTES"]

WATCH_EVERY = 0.5  # seconds between two looks at a watched folder
MAX_DEPTH = 8
MAX_WATCHERS_PER_KEY = 32
WATCHER_IDLE_SECONDS = 600.0  # a watcher nobody asked for this long is dropped

_KINDS = {"file": fs.FILE_TYPE_FILE, "dir": fs.FILE_TYPE_DIRECTORY, "link": fs.FILE_TYPE_SYMLINK}


def entry_info(entry: FileEntry) -> fs.EntryInfo:
    info = fs.EntryInfo(
        name=entry.name,
        type=_KINDS.get(entry.kind, fs.FILE_TYPE_UNSPECIFIED),
        path=entry.path,
        size=entry.size,
        is_symlink=entry.kind == "link",
    )
    mode = _mode_bits(entry.mode, entry.kind)
    info.mode = statmodule.S_IMODE(mode)  # envd's mode: the permission bits
    info.permissions = statmodule.filemode(mode)  # with the type: drwxr-xr-x
    info.modified_time.FromNanoseconds(int(entry.mtime * 1e9))
    return info


def _mode_bits(mode: str, kind: str) -> int:
    """The entry's mode as st_mode bits: listings give the permission bits in octal."""
    text = mode.strip().removeprefix("0o")
    bits = int(text, 8) & 0o7777 if text and set(text) <= set("01234567") else 0o644
    type_bits = {"dir": statmodule.S_IFDIR, "link": statmodule.S_IFLNK}.get(
        kind, statmodule.S_IFREG
    )
    return type_bits | bits


def _stat(caller: Caller, sandbox_id: str, path: str) -> FileEntry:
    full = validation.path(path)
    if full == "/":
        return FileEntry(name="/", path="/", kind="dir", size=0, mtime=0.0, mode="755")
    parent, name = posixpath.split(full)
    for entry in services.list_files(caller.principal, sandbox_id, parent):
        if entry.name == name:
            return entry
    raise NotFound(f"path {full} not found")


async def stat(caller: Caller, sandbox_id: str, request: fs.StatRequest) -> Message:
    entry = await in_db_thread(_stat, caller, sandbox_id, request.path)
    return fs.StatResponse(entry=entry_info(entry))


def _listing(caller: Caller, sandbox_id: str, path: str, depth: int) -> list[FileEntry]:
    found: list[FileEntry] = []
    level = [validation.path(path)]
    for _ in range(depth):
        below: list[str] = []
        for folder in level:
            entries = services.list_files(caller.principal, sandbox_id, folder)
            found.extend(entries)
            below.extend(e.path for e in entries if e.kind == "dir")
        level = below
        if not level:
            break
    return found


async def list_dir(caller: Caller, sandbox_id: str, request: fs.ListDirRequest) -> Message:
    depth = min(max(request.depth, 1), MAX_DEPTH)
    entries = await in_db_thread(_listing, caller, sandbox_id, request.path, depth)
    return fs.ListDirResponse(entries=[entry_info(e) for e in entries])


def _make_dir(caller: Caller, sandbox_id: str, path: str) -> FileEntry:
    try:
        services.make_directory(caller.principal, sandbox_id, path)
    except Conflict as exc:
        raise ConnectError("already_exists", exc.message) from exc
    return _stat(caller, sandbox_id, path)


async def make_dir(caller: Caller, sandbox_id: str, request: fs.MakeDirRequest) -> Message:
    entry = await in_db_thread(_make_dir, caller, sandbox_id, request.path)
    return fs.MakeDirResponse(entry=entry_info(entry))


def _move(caller: Caller, sandbox_id: str, source: str, destination: str) -> FileEntry:
    services.rename_path(caller.principal, sandbox_id, source, destination)
    return _stat(caller, sandbox_id, destination)


async def move(caller: Caller, sandbox_id: str, request: fs.MoveRequest) -> Message:
    entry = await in_db_thread(_move, caller, sandbox_id, request.source, request.destination)
    return fs.MoveResponse(entry=entry_info(entry))


def _remove(caller: Caller, sandbox_id: str, path: str) -> None:
    # As envd: removing what is not there is done already (rm -f), not an error.
    with contextlib.suppress(NotFound):
        services.delete_path(caller.principal, sandbox_id, path)


async def remove(caller: Caller, sandbox_id: str, request: fs.RemoveRequest) -> Message:
    await in_db_thread(_remove, caller, sandbox_id, request.path)
    return fs.RemoveResponse()


# --- watching ---------------------------------------------------------------------------------


def _watched(caller: Caller, sandbox_id: str, path: str, recursive: bool) -> dict[str, FileEntry]:
    """The first look at a folder to watch; a file (or nothing) is refused, as envd does."""
    if _stat(caller, sandbox_id, path).kind != "dir":
        raise ConnectError("invalid_argument", f"path {path} is not a directory")
    return _look(caller, sandbox_id, path, recursive)


def _look(caller: Caller, sandbox_id: str, path: str, recursive: bool) -> dict[str, FileEntry]:
    root = validation.path(path)
    entries = _listing(caller, sandbox_id, root, MAX_DEPTH if recursive else 1)
    return {posixpath.relpath(e.path, root): e for e in entries}


def _changes(
    before: dict[str, FileEntry], after: dict[str, FileEntry], with_entry: bool
) -> list[fs.FilesystemEvent]:
    events = []
    for name, entry in after.items():
        old = before.get(name)
        if old is None:
            kind = fs.EVENT_TYPE_CREATE
        elif (old.size, old.mtime) != (entry.size, entry.mtime) and entry.kind != "dir":
            kind = fs.EVENT_TYPE_WRITE
        else:
            continue
        event = fs.FilesystemEvent(name=name, type=kind)
        if with_entry:
            event.entry.CopyFrom(entry_info(entry))
        events.append(event)
    events.extend(
        fs.FilesystemEvent(name=name, type=fs.EVENT_TYPE_REMOVE)
        for name in before.keys() - after.keys()
    )
    return events


async def watch_dir(
    caller: Caller, sandbox_id: str, request: fs.WatchDirRequest, http: Any
) -> AsyncIterator[Message]:
    seen = await in_db_thread(_watched, caller, sandbox_id, request.path, request.recursive)
    return _watching(caller, sandbox_id, request, seen)


async def _watching(
    caller: Caller, sandbox_id: str, request: fs.WatchDirRequest, seen: dict[str, FileEntry]
) -> AsyncIterator[Message]:
    yield fs.WatchDirResponse(start=fs.WatchDirResponse.StartEvent())
    while True:
        await asyncio.sleep(WATCH_EVERY)
        now = await in_db_thread(_look, caller, sandbox_id, request.path, request.recursive)
        for event in _changes(seen, now, request.include_entry):
            yield fs.WatchDirResponse(filesystem=event)
        seen = now


@dataclass
class Watcher:
    key_id: int
    sandbox_id: str
    request: fs.CreateWatcherRequest
    seen: dict[str, FileEntry]
    used: float = field(default_factory=time.monotonic)


_watchers: dict[str, Watcher] = {}


async def create_watcher(
    caller: Caller, sandbox_id: str, request: fs.CreateWatcherRequest
) -> Message:
    _drop_idle()
    mine = [w for w in _watchers.values() if w.key_id == caller.key.pk]
    if len(mine) >= MAX_WATCHERS_PER_KEY:
        raise ConnectError("resource_exhausted", f"at most {MAX_WATCHERS_PER_KEY} watchers")
    seen = await in_db_thread(_watched, caller, sandbox_id, request.path, request.recursive)
    watcher_id = secrets.token_urlsafe(16)
    _watchers[watcher_id] = Watcher(caller.key.pk, sandbox_id, request, seen)
    return fs.CreateWatcherResponse(watcher_id=watcher_id)


def _watcher(caller: Caller, sandbox_id: str, watcher_id: str) -> Watcher:
    watcher = _watchers.get(watcher_id)
    if watcher is None or (watcher.key_id, watcher.sandbox_id) != (caller.key.pk, sandbox_id):
        raise ConnectError("not_found", f"watcher {watcher_id} not found")
    watcher.used = time.monotonic()
    return watcher


async def get_watcher_events(
    caller: Caller, sandbox_id: str, request: fs.GetWatcherEventsRequest
) -> Message:
    watcher = _watcher(caller, sandbox_id, request.watcher_id)
    spec = watcher.request
    now = await in_db_thread(_look, caller, sandbox_id, spec.path, spec.recursive)
    events = _changes(watcher.seen, now, spec.include_entry)
    watcher.seen = now
    return fs.GetWatcherEventsResponse(events=events)


async def remove_watcher(
    caller: Caller, sandbox_id: str, request: fs.RemoveWatcherRequest
) -> Message:
    _watcher(caller, sandbox_id, request.watcher_id)
    _watchers.pop(request.watcher_id, None)
    return fs.RemoveWatcherResponse()


def _drop_idle() -> None:
    now = time.monotonic()
    for watcher_id, watcher in list(_watchers.items()):
        if now - watcher.used > WATCHER_IDLE_SECONDS:
            _watchers.pop(watcher_id, None)


KEEPALIVES: dict[tuple[str, str], Message] = {
    ("filesystem.Filesystem", "WatchDir"): fs.WatchDirResponse(
        keepalive=fs.WatchDirResponse.KeepAlive()
    ),
}

ROUTES: dict[tuple[str, str], tuple[type[Message], Any, bool]] = {
    ("filesystem.Filesystem", "Stat"): (fs.StatRequest, stat, False),
    ("filesystem.Filesystem", "ListDir"): (fs.ListDirRequest, list_dir, False),
    ("filesystem.Filesystem", "MakeDir"): (fs.MakeDirRequest, make_dir, False),
    ("filesystem.Filesystem", "Move"): (fs.MoveRequest, move, False),
    ("filesystem.Filesystem", "Remove"): (fs.RemoveRequest, remove, False),
    ("filesystem.Filesystem", "WatchDir"): (fs.WatchDirRequest, watch_dir, True),
    ("filesystem.Filesystem", "CreateWatcher"): (fs.CreateWatcherRequest, create_watcher, False),
    ("filesystem.Filesystem", "GetWatcherEvents"): (
        fs.GetWatcherEventsRequest,
        get_watcher_events,
        False,
    ),
    ("filesystem.Filesystem", "RemoveWatcher"): (fs.RemoveWatcherRequest, remove_watcher, False),
}
