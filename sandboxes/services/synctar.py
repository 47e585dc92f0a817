"""Tar streams of the sync services: an upload's body spooled and checked, a download re-tarred.

Uploads: the request body is copied to a spool (memory up to tarballs.SPOOL_BYTES, then
disk) and refused as soon as it passes the transfer limit, before more is read; its headers
are then read once (content skipped by seeking) to refuse what a sync never sends — devices,
hard links, absolute or `..` names, a member under a link of the same archive — as the
caller's error, before the backend sees a byte. The same pass feeds the backend's own
checks and plan (archives.Planner), handed on with the archive (archives.Planned): reading
2,000 headers costs more than sending their 50 MB, so they are not read twice.

Downloads: the backend's tar is written out again member by member as it comes (fresh
headers, the exact pax mtime kept, content in chunks): only the requested names, at most
the transfer limit of content, never whole in memory.
"""

from __future__ import annotations

import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from hosts.backends import archives
from hosts.backends.base import BackendError
from sandboxes.contract.errors import InvalidInput, ServiceError
from sandboxes.services import tarballs

MAX_MEMBERS = 10_000  # per upload, as the backends' archive check allows
CHUNK_BYTES = 64 * 1024
BLOCK = tarfile.BLOCKSIZE


class TooLarge(ServiceError):
    code = "too_large"
    http_status = 413


@dataclass
class UploadScan:
    files: int = 0
    bytes: int = 0
    paths: list[str] = field(default_factory=list)  # every member's name, in order
    planned: archives.Planned | None = None  # the archive with the backends' plan


def spool(stream: IO[bytes], limit: int) -> IO[bytes]:
    """The stream's bytes in a spool positioned at its start (close it); TooLarge beyond
    `limit` bytes, read no further. A seekable stream at its start (an ASGI server's spooled
    body) is used as it is: copying 100 MB again costs a tenth of a second for nothing."""
    if getattr(stream, "seekable", lambda: False)() and stream.tell() == 0:
        size = stream.seek(0, 2)
        stream.seek(0)
        if size > limit:
            raise TooLarge(f"an upload is limited to {limit} bytes of archive per request")
        return stream
    out = tempfile.SpooledTemporaryFile(max_size=tarballs.SPOOL_BYTES)  # noqa: SIM115 - returned
    size = 0
    try:
        while chunk := stream.read(CHUNK_BYTES):
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"an upload is limited to {limit} bytes of archive per request")
            out.write(chunk)
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def scan_upload(source: IO[bytes]) -> UploadScan:
    """What the archive writes (relative names), refusing what a sync may not send, and the
    archive planned for the backend (scan.planned: pass it to put_files)."""
    scan = UploadScan()
    links: set[str] = set()
    planner = archives.Planner()
    try:
        with tarfile.open(fileobj=source, mode="r:") as archive:
            for member in archive:
                if len(scan.paths) >= MAX_MEMBERS:
                    raise InvalidInput(
                        f"an upload holds at most {MAX_MEMBERS} entries; send the rest in "
                        "another request"
                    )
                name = relative_name(member.name.rstrip("/") or ".", "archive member")
                if not (member.isfile() or member.isdir() or member.issym()):
                    raise InvalidInput(
                        f"archive member {name} is not a regular file, directory or symbolic link"
                    )
                if any(parent in links for parent in _parents(name)):
                    raise InvalidInput(f"archive member {name} lies under a link of the archive")
                if member.issym():
                    links.add(name)
                if member.isfile():
                    scan.files += 1
                    scan.bytes += member.size
                scan.paths.append(name)
                planner.add(member)
    except tarfile.TarError as exc:
        raise InvalidInput(f"the body is not a valid tar archive: {exc}") from exc
    except BackendError as exc:  # what the backends refuse in any archive (a sparse file)
        raise InvalidInput(str(exc)) from exc
    source.seek(0)
    scan.planned = archives.Planned(source, planner.finish())
    return scan


def relative_name(value: object, what: str) -> str:
    """A relative POSIX path that stays where it is: no "", ".", ".." parts, not absolute."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string")
    if "\x00" in value or len(value) > 4096:
        raise InvalidInput(f"{what} {value[:80]!r} has a NUL byte or is over 4096 characters")
    parts = value.split("/")
    if value.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise InvalidInput(
            f"{what} {value[:200]!r} must be relative to the sync root, normalised, "
            "without '..' (nothing outside the root)"
        )
    return value


def _parents(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def retar(chunks: Iterator[bytes], wanted: set[str], limit: int) -> Iterator[bytes]:
    """The backend's tar of the requested entries, written out again; `chunks` is closed
    when this ends, fails or is closed. InvalidInput past the limit (mid-stream)."""
    buffer = bytearray()
    total = 0
    try:
        with tarfile.open(fileobj=tarballs.ChunkReader(chunks), mode="r|") as archive:
            for member in archive:
                name = member.name.rstrip("/")
                if name not in wanted:
                    raise InvalidInput(f"the sandbox's archive holds {name!r}, not asked for")
                if not (member.isfile() or member.isdir() or member.issym()):
                    continue
                if member.isfile():
                    total += member.size
                    if total > limit:
                        raise InvalidInput(
                            f"the files hold more than {limit} bytes; download fewer at a time"
                        )
                buffer += _header(member, name)
                if member.isfile():
                    handle = archive.extractfile(member)
                    assert handle is not None  # a regular file has content
                    sent = 0
                    while block := handle.read(CHUNK_BYTES):
                        sent += len(block)
                        buffer += block
                        if len(buffer) >= CHUNK_BYTES:
                            yield bytes(buffer)
                            buffer.clear()
                    if sent != member.size:
                        raise InvalidInput(f"{name} ended early in the sandbox's archive")
                    buffer += bytes(-member.size % BLOCK)
                if len(buffer) >= CHUNK_BYTES:
                    yield bytes(buffer)
                    buffer.clear()
        for _ in chunks:  # the stream's padding, then its verdict (an unreadable file)
            pass
        buffer += bytes(2 * BLOCK)
        yield bytes(buffer)
    finally:
        tarballs.close(chunks)


def _header(member: tarfile.TarInfo, name: str) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = member.type
    info.mode = member.mode & 0o7777
    info.mtime = member.mtime
    info.size = member.size if member.isfile() else 0
    info.linkname = member.linkname if member.issym() else ""
    exact = member.pax_headers.get("mtime")
    if exact:  # GNU tar's nanoseconds, not a float's rounding of them
        info.pax_headers = {"mtime": exact}
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def relative_names(values: object, *, minimum: int, maximum: int) -> list[str]:
    if not isinstance(values, list) or not minimum <= len(values) <= maximum:
        raise InvalidInput(f"paths must be a list of {minimum} to {maximum} relative paths")
    names = [relative_name(value, "path") for value in values]
    return list(dict.fromkeys(names))  # once each, in order
