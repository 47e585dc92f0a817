"""Tar streams in and out of sandboxes: many files per round trip, bounded memory."""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from collections.abc import Iterable, Iterator

from sandboxes.errors import InvalidInput

SANDBOX_UID = 1000
SANDBOX_GID = 1000


def build(files: Iterable[tuple[str, bytes, int]], root: str) -> bytes:
    """A tar of (absolute path, content, mode), with names relative to `root`.

    Parent directories are added explicitly so they belong to the sandbox user too.
    """
    buffer = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        seen_dirs: set[str] = set()
        for full_path, content, mode in files:
            relative = posixpath.relpath(full_path, root)
            _add_parents(archive, relative, seen_dirs, now)
            info = tarfile.TarInfo(relative)
            info.size = len(content)
            info.mode = mode
            info.mtime = now
            info.uid, info.gid = SANDBOX_UID, SANDBOX_GID
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


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
        info.uid, info.gid = SANDBOX_UID, SANDBOX_GID
        archive.addfile(info)
        seen.add(directory)


class ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks, so tarfile can read a stream."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(target), len(self._pending))
        target[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


def first_file(chunks: Iterator[bytes], path: str, chunk_size: int = 64 * 1024) -> Iterator[bytes]:
    """Stream the content of the first regular file in a tar stream, chunk by chunk."""
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


def files_in(chunks: Iterator[bytes], base: str, limit: int) -> list[tuple[str, bytes]]:
    """Every regular file of a tar stream as (absolute path, content), at most `limit` bytes.

    get_archive names members after the basename of the requested path, so they are put
    back under the requested path's parent.
    """
    parent = posixpath.dirname(base.rstrip("/")) or "/"
    result: list[tuple[str, bytes]] = []
    total = 0
    with tarfile.open(fileobj=ChunkReader(chunks), mode="r|") as archive:
        for member in archive:
            if not member.isfile():
                continue
            total += member.size
            if total > limit:
                raise InvalidInput(
                    f"{base} holds more than {limit} bytes; download fewer or smaller files"
                )
            handle = archive.extractfile(member)
            assert handle is not None
            result.append((posixpath.join(parent, member.name), handle.read()))
    return result
