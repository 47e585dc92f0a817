"""Tar streams both ways with bounded memory: one archive per sync, built as it is sent and
unpacked as it arrives.

Times go as PAX "mtime" records with every nanosecond ("1700000000.123456789"): tar's own
header field holds whole seconds, and a float would lose the last digits, so a file pulled
back has exactly the mtime it was pushed with.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import stat
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Protocol

from sandhub.tree import DIR, FILE, LINK, NS, PERMISSION_BITS, Entry

BLOCK = tarfile.BLOCKSIZE
READ_BYTES = 1024 * 1024  # one read of a file being sent
YIELD_BYTES = 256 * 1024  # small members are gathered into chunks about this big
ByteCounter = Callable[[int], None]


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes | None: ...


class TransferError(Exception):
    """A sync that cannot go on: the message says why."""


def pax_time(mtime_ns: int) -> str:
    seconds, fraction = divmod(mtime_ns, NS)
    return f"{seconds}.{fraction:09d}".rstrip("0").rstrip(".")


def member_time_ns(member: tarfile.TarInfo) -> int:
    """The member's mtime in ns, exact when a PAX record carries it."""
    text = member.pax_headers.get("mtime")
    if text:
        try:
            return int(Decimal(text) * NS)
        except ArithmeticError:
            pass
    return int(round(member.mtime * NS))


def header(entry: Entry, *, size: int = 0, mtime_ns: int | None = None) -> bytes:
    info = tarfile.TarInfo(entry.path)
    info.pax_headers = {}  # its own dict: TarInfo's default is a shared read-only mapping
    info.mode = entry.mode & PERMISSION_BITS
    when = entry.mtime_ns if mtime_ns is None else mtime_ns
    info.mtime = when // NS
    if when % NS:
        info.pax_headers["mtime"] = pax_time(when)
    info.uid = info.gid = 0  # the sandbox decides who owns what it writes
    info.uname = info.gname = ""
    if entry.kind == DIR:
        info.type = tarfile.DIRTYPE
    elif entry.kind == LINK:
        info.type, info.linkname = tarfile.SYMTYPE, entry.target
    else:
        info.size = size
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def tar_chunks(
    root: Path,
    entries: Iterable[Entry],
    on_bytes: ByteCounter | None = None,
    *,
    sources: Mapping[str, str] | None = None,
) -> Iterator[bytes]:
    """The entries (relative to `root`) as one tar, in chunks: at most one read buffer and one
    gathering buffer in memory, whatever the tree's size.

    A file is opened without following links (it may have been swapped for one since the
    walk) and sent as it is when read: its size and mtime come from the open file, so header
    and content agree; if it shrinks meanwhile the rest is zeros, if it grows the rest waits
    for the next sync. `sources` names the local file of an entry sent under another name
    (default: root / its path).
    """
    pending = bytearray()
    for entry in entries:
        if entry.kind != FILE:
            pending += header(entry)
        else:
            local = (sources or {}).get(entry.path) or os.path.join(root, entry.path)
            yield from _file_member(local, entry, pending, on_bytes)
        if len(pending) >= YIELD_BYTES:
            yield bytes(pending)
            pending.clear()
    pending += bytes(2 * BLOCK)  # the end-of-archive marker
    yield bytes(pending)


def _file_member(
    local: str, entry: Entry, pending: bytearray, on_bytes: ByteCounter | None
) -> Iterator[bytes]:
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_BINARY", 0)
    try:
        descriptor = os.open(local, flags)
    except OSError as exc:
        raise TransferError(f"cannot read {entry.path}: {exc.strerror}") from exc
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise TransferError(f"{entry.path} is no longer a regular file")
        size = info.st_size
        pending += header(entry, size=size, mtime_ns=info.st_mtime_ns)
        left = size
        while left:
            block = handle.read(min(READ_BYTES, left))
            if not block:
                block = bytes(min(READ_BYTES, left))  # it shrank while being read
            left -= len(block)
            pending += block
            if on_bytes is not None:
                on_bytes(len(block))
            if len(pending) >= YIELD_BYTES:
                yield bytes(pending)
                pending.clear()
        pending += bytes(-size % BLOCK)


class ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks, so tarfile can read a response."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        size = min(len(target), len(self._pending))
        target[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def safe_name(name: str) -> str:
    """A member's name as a relative path inside the root, or TransferError."""
    path = posixpath.normpath(name.removeprefix("./"))
    if path.startswith("/") or path in (".", "") or ".." in path.split("/"):
        raise TransferError(f"the platform sent an entry outside the sync root: {name!r}")
    return path


def ensure_parents(root: Path, path: str) -> None:
    """Create the missing parents of `path` under `root`; refuse to go through a link or a
    file (writing there could land outside the root)."""
    current = os.fspath(root)
    for part in path.split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, 0o755)
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise TransferError(f"refusing to write under {current}: not a directory")


def extract(
    chunks: Iterator[bytes],
    root: Path,
    wanted: Mapping[str, Entry],
    on_bytes: ByteCounter | None = None,
) -> list[str]:
    """Unpack a tar stream (a response's chunks) of `wanted` entries under `root` (modes and
    mtimes kept), one member at a time; returns the paths written. A member that was not
    asked for is refused.

    Files and links are written beside their final name and renamed over it, so a reader
    never sees half a file and an existing link at that name is replaced, never followed.
    """
    written: list[str] = []
    with tarfile.open(fileobj=ChunkReader(chunks), mode="r|") as archive:
        for member in archive:
            path = safe_name(member.name)
            if path not in wanted:
                raise TransferError(f"the platform sent {path!r}, which was not asked for")
            ensure_parents(root, path)
            final = os.path.join(root, path)
            mtime_ns = member_time_ns(member)
            if member.isdir():
                make_dir(final, member.mode & PERMISSION_BITS)
            elif member.issym():
                _place_link(final, member.linkname, mtime_ns)
            elif member.isfile():
                source = archive.extractfile(member)
                assert source is not None
                place_file(final, source, member.mode & PERMISSION_BITS, mtime_ns, on_bytes)
            else:
                raise TransferError(f"the platform sent {path!r} of an unsupported kind")
            written.append(path)
    return written


def _temporary(final: str) -> str:
    head, tail = os.path.split(final)
    return os.path.join(head, f".{tail}.sandhub-{os.getpid()}")


def place_file(
    final: str, source: Readable, mode: int, mtime_ns: int, on_bytes: ByteCounter | None
) -> None:
    """Write `source` to `final` through a temporary file renamed over it, with its mode and
    mtime."""
    temporary = _temporary(final)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    descriptor = os.open(temporary, flags, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            while block := source.read(READ_BYTES):
                handle.write(block)
                if on_bytes is not None:
                    on_bytes(len(block))
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.utime(handle.fileno(), ns=(mtime_ns, mtime_ns))
        os.replace(temporary, final)
    except BaseException:
        _remove_quietly(temporary)
        raise


def _place_link(final: str, target: str, mtime_ns: int) -> None:
    temporary = _temporary(final)
    _remove_quietly(temporary)
    os.symlink(target, temporary)
    try:
        os.replace(temporary, final)
    except BaseException:
        _remove_quietly(temporary)
        raise
    if os.utime in os.supports_follow_symlinks:
        os.utime(final, ns=(mtime_ns, mtime_ns), follow_symlinks=False)


def make_dir(path: str, mode: int) -> None:
    """A directory at `path` (made if missing) with permissions `mode`."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        os.mkdir(path, 0o700)
    else:
        if not stat.S_ISDIR(info.st_mode):
            raise TransferError(f"{path} is in the way of a directory")
    os.chmod(path, mode)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
