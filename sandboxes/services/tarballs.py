"""Tar streams in and out of sandboxes: many files per round trip, bounded memory.

Whatever reads a backend's stream closes it on every way out (the end, an error, a limit
reached, a reader that stops early): an unclosed stream keeps a process and a connection busy
in the sandbox until the garbage collector gets to it.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import IO

from sandboxes.contract.errors import InvalidInput

SPOOL_BYTES = 1024 * 1024  # an upload's archive is kept in memory up to this, then on disk
MAX_DOWNLOAD_MEMBERS = 100_000  # entries of any kind read from one download's archive
MAX_DOWNLOAD_NAME_BYTES = 4 * 1024 * 1024  # the returned files' paths, on top of the content


def build(files: Iterable[tuple[str, bytes | IO[bytes], int, int]], root: str) -> IO[bytes]:
    """A tar of (absolute path, content or binary file object, size, mode), with names
    relative to `root`, as a file object positioned at its start (close it when done).

    File objects are read `size` bytes from where they are, in chunks: memory stays bounded
    by SPOOL_BYTES whatever the upload's size. OSError if one holds fewer bytes.
    """
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - returned
    now = time.time()
    try:
        with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as archive:
            seen_dirs: set[str] = set()
            for full_path, content, size, mode in files:
                relative = posixpath.relpath(full_path, root)
                _add_parents(archive, relative, seen_dirs, now)
                info = tarfile.TarInfo(relative)
                info.size, info.mode, info.mtime = size, mode, now
                source = io.BytesIO(content) if isinstance(content, bytes) else content
                archive.addfile(info, source)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def _add_parents(archive: tarfile.TarFile, relative: str, seen: set[str], now: float) -> None:
    parent = posixpath.dirname(relative)
    parts: list[str] = []
    while parent and parent not in seen:
        parts.append(parent)
        parent = posixpath.dirname(parent)
    for directory in reversed(parts):
        info = tarfile.TarInfo(directory)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        info.mtime = now
        archive.addfile(info)
        seen.add(directory)


class ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks, so tarfile can read a stream."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:  # a writable buffer
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        size = min(len(target), len(self._pending))
        target[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def close(chunks: Iterator[bytes]) -> None:
    """Release what feeds `chunks` (a backend's stream) now; errors on closing are not news."""
    closer = getattr(chunks, "close", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            closer()


def first_file(chunks: Iterator[bytes], path: str, chunk_size: int = 64 * 1024) -> Iterator[bytes]:
    """Stream the content of the first regular file in a tar stream, chunk by chunk.

    `chunks` is closed when this generator ends, fails or is closed.
    """
    try:
        with tarfile.open(fileobj=ChunkReader(chunks), mode="r|") as archive:
            for member in archive:
                if member.isfile():
                    handle = archive.extractfile(member)
                    assert handle is not None
                    while block := handle.read(chunk_size):
                        yield block
                    return
                if member.isdir():
                    raise InvalidInput(f"{path} is a directory; download its files one by one")
        raise InvalidInput(f"{path} is not a regular file")
    finally:
        close(chunks)


def files_in(chunks: Iterator[bytes], base: str, limit: int) -> list[tuple[str, bytes]]:
    """Every regular file of a tar stream as (absolute path, content).

    At most `limit` bytes of content (and MAX_DOWNLOAD_NAME_BYTES of paths, so many empty
    files cannot fill memory either): the limit is checked on each member's header, before
    its content is read, and the stream is closed at once when it is passed (or on any other
    way out). Read to its end otherwise, so that an error the stream
    reports there (a file the sandbox user could not read) is raised, not lost.

    Members are named after the basename of the requested path (as tar in the sandbox and the
    engine's get_archive name them), so they are put back under the requested path's parent.
    """
    parent = posixpath.dirname(base.rstrip("/")) or "/"
    result: list[tuple[str, bytes]] = []
    total = names = 0
    try:
        with tarfile.open(fileobj=ChunkReader(chunks), mode="r|") as archive:
            for count, member in enumerate(archive, 1):
                if count > MAX_DOWNLOAD_MEMBERS:
                    raise InvalidInput(
                        f"{base} holds more than {MAX_DOWNLOAD_MEMBERS} entries; "
                        "download a smaller directory"
                    )
                if not member.isfile():
                    continue
                path = posixpath.normpath(posixpath.join(parent, member.name))
                total += member.size
                names += len(path)
                if names > MAX_DOWNLOAD_NAME_BYTES:
                    raise InvalidInput(
                        f"{base} holds too many files ({len(result)} so far); download a "
                        "smaller directory"
                    )
                if total > limit:
                    raise InvalidInput(
                        f"{base} holds more than {limit} bytes; download fewer or smaller files"
                    )
                handle = archive.extractfile(member)
                assert handle is not None
                result.append((path, handle.read()))
        for _ in chunks:  # the archive's padding, then the stream's verdict
            pass
    finally:
        close(chunks)
    return result
