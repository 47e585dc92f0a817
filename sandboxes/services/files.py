"""Files: upload and write (tar streams into the workspace), download, stream, list, read."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from django.conf import settings

from sandboxes import tarballs, validation
from sandboxes.access import READ, WRITE
from sandboxes.auditing import audited, current
from sandboxes.errors import InvalidInput, NotFound
from sandboxes.models import Sandbox
from sandboxes.results import FileContent, FileEntry, UploadFile, UploadResult
from sandboxes.services.common import (
    backend_errors,
    backend_of,
    decode_output,
    running_sandbox,
    touch,
)
from tenants.principal import Principal

READ_FILE_MAX_BYTES = 4 * 1024 * 1024


@audited("files.upload", "sandbox")
def upload_files(principal: Principal, sandbox_id: str, files: list[UploadFile]) -> UploadResult:
    """Write many files in one tar stream; relative paths are taken from /workspace."""
    prepared = _prepare_uploads(files)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "write files")
    _put(sandbox, prepared)
    paths = [path for path, _, _ in prepared]
    total = sum(len(content) for _, content, _ in prepared)
    current().details.update({"paths": paths[:50], "bytes": total})
    touch(sandbox)
    return UploadResult(sandbox_id=sandbox.public_id, paths=paths, total_bytes=total)


@audited("files.write", "sandbox")
def write_file(
    principal: Principal, sandbox_id: str, path: str, content: bytes | str, *, mode: int = 0o644
) -> UploadResult:
    current().target("sandbox", sandbox_id)
    data = content.encode() if isinstance(content, str) else content
    prepared = _prepare_uploads([UploadFile(path=path, content=data, mode=mode)])
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "write files")
    _put(sandbox, prepared)
    current().details.update({"path": prepared[0][0], "bytes": len(data)})
    touch(sandbox)
    return UploadResult(sandbox_id=sandbox.public_id, paths=[prepared[0][0]], total_bytes=len(data))


def _prepare_uploads(files: Any) -> list[tuple[str, bytes, int]]:
    if not isinstance(files, list | tuple) or not files:
        raise InvalidInput("files must be a non-empty list")
    if len(files) > 1000:
        raise InvalidInput("at most 1000 files per upload")
    prepared: list[tuple[str, bytes, int]] = []
    total = 0
    for item in files:
        if not isinstance(item, UploadFile) or not isinstance(item.content, bytes | bytearray):
            raise InvalidInput("each file needs a path and bytes content")
        full = validation.path(item.path, "file path", under_workspace=True)
        if full == validation.WORKSPACE:
            raise InvalidInput("a file path must name a file inside /workspace")
        validation.positive_int(item.mode, "file mode", minimum=0, maximum=0o7777)
        total += len(item.content)
        prepared.append((full, bytes(item.content), item.mode))
    limit = settings.SANDHUB_MAX_TRANSFER_BYTES
    if total > limit:
        raise InvalidInput(f"upload of {total} bytes is over the {limit}-byte limit")
    return prepared


def _put(sandbox: Sandbox, prepared: list[tuple[str, bytes, int]]) -> None:
    archive = tarballs.build(prepared, validation.WORKSPACE)
    with backend_errors(sandbox, "write files"):
        backend_of(sandbox).put_files(sandbox.backend_state, validation.WORKSPACE, archive)


@audited("files.download", "sandbox")
def download_files(
    principal: Principal, sandbox_id: str, paths: list[str], *, max_bytes: int | None = None
) -> list[tuple[str, bytes]]:
    """Files (or every file under directories) as (absolute path, content), one tar each.

    At most max_bytes in all (default and ceiling: SANDHUB_MAX_TRANSFER_BYTES); the stream is
    refused as soon as it passes the limit, before more is read.
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
    result: list[tuple[str, bytes]] = []
    for path in wanted:
        stream = _get(sandbox, path)
        result += tarballs.files_in(stream, path, limit - sum(len(c) for _, c in result))
    current().details.update({"paths": wanted[:50], "files": len(result)})
    return result


@audited("files.stream", "sandbox")
def open_file_stream(principal: Principal, sandbox_id: str, path: str) -> Iterator[bytes]:
    """One file's content as a stream of chunks, never whole in memory (for HTTP downloads)."""
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    sandbox = running_sandbox(principal, sandbox_id, READ, "read files")
    current().details["path"] = full
    chunks = tarballs.first_file(_get(sandbox, full), full)
    # Read the first chunk here, so "is a directory" and engine errors are raised (and
    # audited) by this call rather than by whoever iterates the stream later.
    first = next(chunks, b"")
    return itertools.chain([first], chunks)


def _get(sandbox: Sandbox, path: str) -> Iterator[bytes]:
    with backend_errors(sandbox, f"read {path}", missing=path):
        return backend_of(sandbox).get_files(sandbox.backend_state, path)


@audited("files.list", "sandbox")
def list_files(
    principal: Principal, sandbox_id: str, path: str = validation.WORKSPACE
) -> list[FileEntry]:
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    sandbox = running_sandbox(principal, sandbox_id, READ, "list files")
    current().details["path"] = full
    with backend_errors(sandbox, f"list {full}", missing=full):
        entries = backend_of(sandbox).list_dir(sandbox.backend_state, full)
    return [FileEntry.model_validate(entry, from_attributes=True) for entry in entries]


# Size on stderr, the requested byte range on stdout: one round trip, binary-safe.
_NOT_A_FILE = 3
_READ_RANGE = (
    '[ -d "$1" ] && exit 3; stat -c %s -- "$1" >&2 && tail -c +"$2" -- "$1" | head -c "$3"'
)


@audited("files.read", "sandbox")
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
    if result.exit_code == _NOT_A_FILE:
        raise InvalidInput(f"{full} is not a regular file")
    if result.exit_code != 0:
        reason = decode_output(result.stderr).strip()
        if not reason or "No such file" in reason:
            raise NotFound(f"{full} not found in sandbox {sandbox_id}")
        raise InvalidInput(f"cannot read {full}: {reason.splitlines()[-1]}")
    size = int(result.stderr.decode().split()[0])
    content = result.stdout[:max_bytes]
    return FileContent(
        path=full, content=content, offset=offset, size=size, eof=offset + len(content) >= size
    )
