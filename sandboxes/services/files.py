"""Files: upload and write (tar streams into the workspace), download, stream, list, read.

Every read acts as the sandbox user (the backend reads inside the sandbox as that user): what
the sandbox user may not read is refused with a clear message, never read as root. Transfers
stay bounded in memory: uploads are read from file objects in chunks (UploadSource), downloads
stop at their limit before reading further, and every backend stream is closed on every way
out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings

from sandboxes.contract.errors import BackendFailure, InvalidInput, NotFound
from sandboxes.contract.lifecycle import ResumedList
from sandboxes.contract.results import FileContent, FileEntry, FileStream, UploadFile, UploadResult
from sandboxes.models import Sandbox
from sandboxes.policy import validation
from sandboxes.policy.access import READ, WRITE
from sandboxes.services import tarballs
from sandboxes.services.common import (
    backend_errors,
    backend_of,
    decode_output,
    running_sandbox,
    started_stream,
    touch,
)
from tenants.auditing import AUDIT_READ, AUDIT_VIEW, audited, current
from tenants.principal import Principal

READ_FILE_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class UploadSource:
    """One file of an upload, read from a binary file object in chunks, never whole.

    For uploads too large to hold in memory (an HTTP body spooled to disk, an uploaded file):
    `size` bytes are read from the stream's current position. The caller keeps the stream
    open until the upload returns, and closes it.
    """

    path: str
    stream: IO[bytes]
    size: int
    mode: int = 0o644


@dataclass(frozen=True)
class _Upload:
    path: str  # absolute, under /workspace
    content: bytes | IO[bytes]
    size: int
    mode: int


@audited("files.upload", "sandbox")
def upload_files(
    principal: Principal, sandbox_id: str, files: Sequence[UploadFile | UploadSource]
) -> UploadResult:
    """Write many files in one tar stream; relative paths are taken from /workspace."""
    prepared = _prepare_uploads(files)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "write files")
    _put(sandbox, prepared)
    paths = [item.path for item in prepared]
    total = sum(item.size for item in prepared)
    current().details.update({"paths": paths[:50], "bytes": total})
    touch(sandbox)
    return UploadResult(
        sandbox_id=sandbox.public_id,
        paths=paths,
        total_bytes=total,
        resumed_seconds=sandbox.resumed_seconds,
    )


@audited("files.write", "sandbox")
def write_file(
    principal: Principal, sandbox_id: str, path: str, content: bytes | str, *, mode: int = 0o644
) -> UploadResult:
    current().target("sandbox", sandbox_id)
    data = content.encode() if isinstance(content, str) else content
    prepared = _prepare_uploads([UploadFile(path=path, content=data, mode=mode)])
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "write files")
    _put(sandbox, prepared)
    current().details.update({"path": prepared[0].path, "bytes": len(data)})
    touch(sandbox)
    return UploadResult(
        sandbox_id=sandbox.public_id,
        paths=[prepared[0].path],
        total_bytes=len(data),
        resumed_seconds=sandbox.resumed_seconds,
    )


def _prepare_uploads(files: Any) -> list[_Upload]:
    if not isinstance(files, list | tuple) or not files:
        raise InvalidInput("files must be a non-empty list")
    if len(files) > 1000:
        raise InvalidInput("at most 1000 files per upload")
    prepared: list[_Upload] = []
    for item in files:
        if isinstance(item, UploadSource):
            if not hasattr(item.stream, "read"):
                raise InvalidInput(f"{item.path}: the content must be a readable stream")
            content: bytes | IO[bytes] = item.stream
            validation.positive_int(item.size, "file size", minimum=0)
            size = item.size
        elif isinstance(item, UploadFile) and isinstance(item.content, bytes | bytearray):
            content, size = bytes(item.content), len(item.content)
        else:
            raise InvalidInput("each file needs a path and bytes content")
        full = validation.path(item.path, "file path", under_workspace=True)
        if full == validation.WORKSPACE:
            raise InvalidInput("a file path must name a file inside /workspace")
        validation.positive_int(item.mode, "file mode", minimum=0, maximum=0o7777)
        prepared.append(_Upload(full, content, size, item.mode))
    total = sum(item.size for item in prepared)
    limit = settings.SANDHUB_MAX_TRANSFER_BYTES
    if total > limit:
        raise InvalidInput(f"upload of {total} bytes is over the {limit}-byte limit")
    return prepared


def _put(sandbox: Sandbox, prepared: list[_Upload]) -> None:
    files = [(item.path, item.content, item.size, item.mode) for item in prepared]
    try:
        archive = tarballs.build(files, validation.WORKSPACE)
    except OSError as exc:  # a stream that held fewer bytes than its size said
        raise InvalidInput(f"an uploaded file ended early: {exc}") from exc
    with archive, _refusals(validation.WORKSPACE, "write"), backend_errors(sandbox, "write files"):
        backend_of(sandbox).put_files(sandbox.backend_state, validation.WORKSPACE, archive)


@contextlib.contextmanager
def _refusals(path: str, verb: str) -> Iterator[None]:
    """What the sandbox user may not do, as the caller's error rather than the host's."""
    try:
        yield
    except PermissionError as exc:
        what = f" ({exc})" if str(exc) else ""
        raise InvalidInput(
            f"cannot {verb} {path}: permission denied: the sandbox user may not {verb} it{what}"
        ) from exc
    except (NotADirectoryError, FileExistsError) as exc:
        raise InvalidInput(str(exc) or f"cannot {verb} {path}") from exc


@audited("files.download", "sandbox", kind=AUDIT_READ)
def download_files(
    principal: Principal, sandbox_id: str, paths: list[str], *, max_bytes: int | None = None
) -> ResumedList[tuple[str, bytes]]:
    """Files (or every file under directories) as (absolute path, content), one tar each.

    At most max_bytes of content in all (default and ceiling: SANDHUB_MAX_TRANSFER_BYTES);
    the stream is refused and closed as soon as it passes the limit, before more is read.
    """
    current().target("sandbox", sandbox_id)
    ceiling = settings.SANDHUB_MAX_TRANSFER_BYTES
    limit = ceiling if max_bytes is None else max_bytes
    validation.positive_int(limit, "max_bytes", minimum=1, maximum=ceiling)
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths or len(paths) > 100:
        raise InvalidInput("paths must be a list of 1 to 100 paths")
    wanted = [validation.path(p) for p in paths]
    sandbox = running_sandbox(principal, sandbox_id, READ, "read files")
    result: ResumedList[tuple[str, bytes]] = ResumedList(resumed_seconds=sandbox.resumed_seconds)
    for path in wanted:
        left = limit - sum(len(content) for _, content in result)
        with _reading(sandbox, path):
            stream = backend_of(sandbox).get_files(sandbox.backend_state, path)
            result += tarballs.files_in(stream, path, left)  # closes the stream
    current().details.update({"paths": wanted[:50], "files": len(result)})
    return result


@audited("files.stream", "sandbox", kind=AUDIT_READ)
def open_file_stream(principal: Principal, sandbox_id: str, path: str) -> FileStream:
    """One file's content as a stream of chunks, never whole in memory (for HTTP downloads).

    close() the result when done with it, read to the end or not: that releases the
    backend's stream at once.
    """
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    sandbox = running_sandbox(principal, sandbox_id, READ, "read files")
    current().details["path"] = full
    with _reading(sandbox, full):
        stream = backend_of(sandbox).get_files(sandbox.backend_state, full)
        # first_file closes the stream when it ends; "is a directory" comes at its start.
        return started_stream(tarballs.first_file(stream, full), stream)


@contextlib.contextmanager
def _reading(sandbox: Sandbox, path: str) -> Iterator[None]:
    with _refusals(path, "read"), backend_errors(sandbox, f"read {path}", missing=path):
        yield


@audited("files.list", "sandbox", kind=AUDIT_VIEW)
def list_files(
    principal: Principal, sandbox_id: str, path: str = validation.WORKSPACE
) -> ResumedList[FileEntry]:
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    sandbox = running_sandbox(principal, sandbox_id, READ, "list files")
    current().details["path"] = full
    with backend_errors(sandbox, f"list {full}", missing=full):
        entries = backend_of(sandbox).list_dir(sandbox.backend_state, full)
    return ResumedList(
        [FileEntry.model_validate(entry, from_attributes=True) for entry in entries],
        resumed_seconds=sandbox.resumed_seconds,
    )


# Size on stderr, the requested byte range on stdout: one round trip, binary-safe. What the
# sandbox user may not read is said so (exit 13, or a marker if tail failed on the way), not
# answered with empty content: a pager would never reach the end.
_NOT_A_FILE = 3
_DENIED = 13
_UNREAD = b"sandhub-unread"
_READ_RANGE = """
stat -c %s -- "$1" >&2 || exit 1
[ -f "$1" ] || exit 3
[ -r "$1" ] || { echo "permission denied" >&2; exit 13; }
{ tail -c +"$2" -- "$1"; rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 141 ] || echo "sandhub-unread $rc" >&2; } | head -c "$3"
"""


@audited("files.read", "sandbox", kind=AUDIT_READ)
def read_file(
    principal: Principal,
    sandbox_id: str,
    path: str,
    *,
    offset: int = 0,
    max_bytes: int = 1024 * 1024,
) -> FileContent:
    """Up to max_bytes of a file from offset; says the file's size and whether that is all."""
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    validation.positive_int(offset, "offset", minimum=0)
    validation.positive_int(max_bytes, "max_bytes", minimum=1, maximum=READ_FILE_MAX_BYTES)
    sandbox = running_sandbox(principal, sandbox_id, READ, "read files")
    current().details.update({"path": full, "offset": offset})
    argv = ["sh", "-c", _READ_RANGE, "sh", full, str(offset + 1), str(max_bytes)]
    with backend_errors(sandbox, f"read {full}"):
        result = backend_of(sandbox).exec(
            sandbox.backend_state, argv, cwd="/", env={}, timeout=60, output_cap=max_bytes + 1024
        )
    reason = decode_output(result.stderr).strip()
    if result.exit_code == _NOT_A_FILE:
        raise InvalidInput(f"{full} is not a regular file")
    if result.exit_code == _DENIED:
        raise InvalidInput(
            f"cannot read {full}: permission denied (the sandbox user may not read it)"
        )
    if result.exit_code != 0:
        if not reason or "No such file" in reason:
            raise NotFound(f"{full} not found in sandbox {sandbox_id}")
        raise InvalidInput(f"cannot read {full}: {reason.splitlines()[-1]}")
    if _UNREAD in result.stderr:
        lines = [line for line in reason.splitlines()[1:] if "sandhub-unread" not in line]
        raise InvalidInput(f"cannot read {full}: {lines[-1] if lines else 'read failed'}")
    try:
        size = int(result.stderr.split()[0])
    except (IndexError, ValueError) as exc:
        raise BackendFailure(f"could not read {full}: no size in {reason[:200]!r}") from exc
    content = result.stdout[:max_bytes]
    return FileContent(
        path=full,
        content=content,
        offset=offset,
        size=size,
        eof=offset + len(content) >= size,
        resumed_seconds=sandbox.resumed_seconds,
    )
