"""Sync of a tree: its manifest, page by page, and deletions (part 5 of the agent).

A sync root is reached without following a symbolic link: from `top` (/workspace as this
side sees it), each directory on the way is opened with O_NOFOLLOW, so a link (/workspace/out
-> /etc, or one further up) is refused by name instead of leading the manifest, a deletion
or a download outside the workspace, and the tree is then walked from the directory opened.

The manifest is sorted by path bytewise (UTF-8 order: a-x < a.txt < a/b), yet walked lazily:
at each level the entries and the subtrees of directories are merged under the keys `name`
and `name/`, which is exactly where the subtree's paths fall among its siblings. So a page
after a cursor skips whole subtrees that lie before it, and the walk stops as soon as the
page is full: a page costs about its own size, not the tree's.
"""

from __future__ import annotations

import json
import os
import shutil
import stat

from .constants import CH_ENTRIES, CHUNK, ERR_INVALID, ERR_NOT_A_DIRECTORY
from .wire import Refusal, Request, refusal

MANIFEST_MAX = 5000  # entries in one page, as the services cap it
_NO_LINK_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SYNC_KINDS = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "link"))


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a surrogate escape: the name is not UTF-8
        return False
    return True


def _manifest_row(path: str, full: str, info: os.stat_result) -> list | None:
    kind = next((label for test, label in _SYNC_KINDS if test(info.st_mode)), "")
    if not kind:
        return None  # fifos, sockets, devices have no place in a sync
    target = ""
    if kind == "link":
        try:
            target = os.readlink(full)
        except OSError:
            return None
        if not _utf8(target):
            return None
    seconds, nanoseconds = divmod(info.st_mtime_ns, 1000000000)
    size = 0 if kind == "dir" else info.st_size
    mtime = float(f"{seconds}.{nanoseconds:09d}")
    return [path, kind, size, mtime, info.st_mode & 0o7777, target]


def _walk(top: str, prefix: str, after: str):
    """Rows under `top` (whose paths start with `prefix`) with a path > after, in order."""
    try:
        with os.scandir(top) as listing:
            items = [item for item in listing if _utf8(item.name)]
    except OSError:
        return  # unreadable, or gone since it was seen: what it holds is not listed
    events = []
    for item in items:
        events.append((item.name, False, item))
        if item.is_dir(follow_symlinks=False):
            events.append((item.name + "/", True, item))
    events.sort(key=lambda event: event[0])
    for key, subtree, item in events:
        path = prefix + key
        if subtree:
            # Every path below starts with `path` (ends in "/"): all after the cursor if
            # path is, none if the cursor is past them all.
            if path > after or after.startswith(path):
                yield from _walk(item.path, path, after)
        elif path > after:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the listing
            row = _manifest_row(path, item.path, info)
            if row is not None:
                yield row


def _shown(path: str, top: str) -> str:
    """A path as the sandbox names it (top is /workspace there)."""
    return "/workspace" + path[len(top.rstrip("/")) :]


def _open_root(root: str, top: str) -> int | None:
    """root's directory, opened from top one directory at a time without following a link:
    its fd, or None when it (or a directory on the way) is missing. Refusal for a symbolic
    link or a file on the way, or a root outside top."""
    top = top.rstrip("/") or "/"
    if root != top and not root.startswith(top.rstrip("/") + "/"):
        raise Refusal(ERR_INVALID, f"{root} is not under {top}")
    parent, path = None, top
    parts = [""] + [part for part in root[len(top) :].split("/") if part]
    for part in parts:
        if part:
            path = path.rstrip("/") + "/" + part
        try:
            fd = os.open(part or top, _NO_LINK_DIRECTORY, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != 20:  # ENOTDIR: a link, or a file (told apart below)
                raise refusal(exc, f"cannot open {_shown(path, top)}") from None
            if stat.S_ISLNK(os.lstat(part or top, dir_fd=parent).st_mode):
                message = "is a symbolic link: a sync root is never reached through one"
            else:
                message = "is not a directory"
            raise Refusal(ERR_NOT_A_DIRECTORY, f"{_shown(path, top)} {message}") from None
        finally:
            if parent is not None:
                os.close(parent)
        parent = fd
    return parent


def op_manifest(request: Request) -> dict:
    """Up to `limit` entries under `root` with a path after `after`, sorted; DATA on
    CH_ENTRIES (JSON lists of [path, kind, size, mtime, mode, target]) and RESULT
    {"exists", "next", "count"}."""
    root = str(request.args["root"])
    after = str(request.args.get("after") or "")
    limit = int(request.args.get("limit") or 1000)
    if not 1 <= limit <= MANIFEST_MAX:
        raise Refusal(ERR_INVALID, f"limit must be 1 to {MANIFEST_MAX}")
    fd = _open_root(root, str(request.args.get("top") or root))
    if fd is None:
        return {"exists": False, "next": None, "count": 0}
    try:
        return _manifest_page(request, f"/proc/self/fd/{fd}", after, limit)
    finally:
        os.close(fd)


def _manifest_page(request: Request, top: str, after: str, limit: int) -> dict:
    """The page, walked from `top` (the root's directory, as this process holds it open)."""
    rows: list = []
    wire, size, count, last = request.wire, 0, 0, None
    walk = _walk(top, "", after)
    for row in walk:
        if count == limit:
            walk.close()
            return _flush(request, rows, {"exists": True, "next": last, "count": count})
        rows.append(row)
        count, last = count + 1, row[0]
        size += len(row[0]) + len(row[5]) + 80
        if size > CHUNK // 2:
            wire.send(wire.data(request.rid, CH_ENTRIES, json.dumps(rows).encode()))
            rows, size = [], 0
    return _flush(request, rows, {"exists": True, "next": None, "count": count})


def _flush(request: Request, rows: list, result: dict) -> dict:
    if rows:
        request.wire.send(request.wire.data(request.rid, CH_ENTRIES, json.dumps(rows).encode()))
    return result


def op_remove(request: Request) -> dict:
    """Remove the entries named (relative to `root`, NUL-separated on CH_STDIN): files and
    links unlinked, directories with what they hold. The root is reached without a link
    (_open_root); a name with `..`, `.` or an empty part is skipped, and so is one whose
    parent resolves outside the root (a link on the way): nothing outside the root is
    touched. RESULT {"removed"}: how many existed."""
    root = str(request.args["root"])
    data = bytearray()
    while True:
        chunk = request.take()
        if chunk is None:
            break
        data += chunk
    fd = _open_root(root, str(request.args.get("top") or root))
    if fd is None:
        return {"removed": 0}
    try:  # where the directory opened is (a name already checked for links)
        real = os.path.realpath(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    removed = 0
    for raw in bytes(data).split(b"\0"):
        name = raw.decode("utf-8", "surrogateescape")
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            continue
        parent = os.path.realpath(os.path.join(real, *parts[:-1]))
        if parent != real and not parent.startswith(real.rstrip("/") + "/"):
            continue
        target = os.path.join(parent, parts[-1])
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise refusal(exc, f"cannot delete {name}") from None
        try:
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(target)  # never follows a link inside (fd-based where it can)
            else:
                os.unlink(target)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise refusal(exc, f"cannot delete {name}") from None
        removed += 1
    return {"removed": removed}
