"""Download a folder (or a file) of a sandbox as one tar or tar.gz, streamed.

The backend's tar stream is read member by member and written out again as it comes (a
fresh header, the content in chunks, the padding), optionally through gzip: nothing is held
whole in memory, whatever the folder's size. The limits are the file services' own: at most
SANDHUB_MAX_TRANSFER_BYTES of content and tarballs.MAX_DOWNLOAD_MEMBERS entries, checked on
each member's header before its content is sent. A limit passed, or an error the backend's
stream reports at its end (a file the sandbox user may not read), is raised from the stream
mid-way: the HTTP response then breaks off and the browser marks the download failed, rather
than saving an archive that silently lacks files.
"""

from __future__ import annotations

import contextlib
import tarfile
import zlib
from collections.abc import Iterator

from django.conf import settings

from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.results import FileStream
from sandboxes.models import Sandbox
from sandboxes.policy import validation
from sandboxes.policy.access import READ
from sandboxes.services import tarballs
from sandboxes.services.common import backend_errors, backend_of, running_sandbox, started_stream
from tenants.auditing import AUDIT_READ, audited, current
from tenants.principal import Principal

CHUNK_BYTES = 64 * 1024
BLOCK = tarfile.BLOCKSIZE  # 512


@audited("files.archive", "sandbox", kind=AUDIT_READ)
def open_archive_stream(
    principal: Principal, sandbox_id: str, path: str, *, gzip: bool = False
) -> FileStream:
    """`path` and everything under it as a tar (tar.gz with gzip=True), as chunks.

    Member names start with the basename of `path` (`src/app.py` for /workspace/src). close()
    the result when done with it: that releases the backend's stream at once.
    """
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    sandbox = running_sandbox(principal, sandbox_id, READ, "read files")
    current().details.update({"path": full, "gzip": gzip})
    limit = settings.SANDHUB_MAX_TRANSFER_BYTES
    with _reading(sandbox, full):
        stream = backend_of(sandbox).get_files(sandbox.backend_state, full)
        return started_stream(_retar(stream, full, limit, gzip), stream)


@contextlib.contextmanager
def _reading(sandbox: Sandbox, path: str) -> Iterator[None]:
    try:
        with backend_errors(sandbox, f"read {path}", missing=path):
            yield
    except PermissionError as exc:
        raise InvalidInput(
            f"cannot read {path}: permission denied (the sandbox user may not read it): {exc}"
        ) from exc


class _Output:
    """Collects the archive's bytes (through gzip when asked) and hands them out in chunks
    of about CHUNK_BYTES, so small headers do not each become a network write."""

    def __init__(self, gzip: bool) -> None:
        self._gzip = zlib.compressobj(6, zlib.DEFLATED, 31) if gzip else None
        self._buffer = bytearray()

    def put(self, data: bytes) -> Iterator[bytes]:
        self._buffer += self._gzip.compress(data) if self._gzip else data
        if len(self._buffer) >= CHUNK_BYTES:
            chunk, self._buffer = bytes(self._buffer), bytearray()
            yield chunk

    def finish(self) -> Iterator[bytes]:
        if self._gzip:
            self._buffer += self._gzip.flush()
        if self._buffer:
            yield bytes(self._buffer)


def _retar(chunks: Iterator[bytes], base: str, limit: int, gzip: bool) -> Iterator[bytes]:
    """The tar stream `chunks`, written out again member by member within the limits.

    `chunks` is closed when this generator ends, fails or is closed.
    """
    out = _Output(gzip)
    total = 0
    try:
        with tarfile.open(fileobj=tarballs.ChunkReader(chunks), mode="r|") as archive:
            for count, member in enumerate(archive, 1):
                if count > tarballs.MAX_DOWNLOAD_MEMBERS:
                    raise InvalidInput(
                        f"{base} holds more than {tarballs.MAX_DOWNLOAD_MEMBERS} entries; "
                        "download a smaller folder"
                    )
                if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                    continue  # devices and pipes have no place in a download
                if member.isfile():
                    total += member.size
                    if total > limit:
                        raise InvalidInput(
                            f"{base} holds more than {limit} bytes; download a smaller folder"
                        )
                yield from out.put(member.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
                if member.isfile():
                    yield from _content(archive, member, out)
        for _ in chunks:  # the stream's padding, then its verdict (an unreadable file)
            pass
        yield from out.put(b"\0" * (2 * BLOCK))  # end of archive
        yield from out.finish()
    finally:
        tarballs.close(chunks)


def _content(archive: tarfile.TarFile, member: tarfile.TarInfo, out: _Output) -> Iterator[bytes]:
    handle = archive.extractfile(member)
    assert handle is not None  # a regular file always has content to extract
    sent = 0
    while block := handle.read(CHUNK_BYTES):
        sent += len(block)
        yield from out.put(block)
    if sent != member.size:  # the stream ended inside the file
        raise InvalidInput(f"{member.name} ended early in the sandbox's archive")
    padding = -member.size % BLOCK
    if padding:
        yield from out.put(b"\0" * padding)
