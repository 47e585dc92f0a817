"""The files of an envd upload (POST /files), spooled (1 MiB in memory, the rest on disk) and
never whole in memory: one file from an `application/octet-stream` body (gzip if the request
says so), or each "file" part of a multipart body, named by its filename as sent. Django's
own multipart parser keeps only a filename's last component (a safety for saving uploads
to disk), and E2B's SDKs send the whole path there: python-multipart parses it instead.
"""

from __future__ import annotations

import contextlib
import gzip
import tempfile
from typing import IO, Any

from python_multipart.multipart import MultipartParser, parse_options_header

from sandboxes.contract.errors import InvalidInput
from sandboxes.services import UploadSource

__all__ = ["TooLarge", "read_uploads"]

CHUNK = 64 * 1024
MEMORY = 1024 * 1024


class TooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"uploads are limited to {limit} bytes per request")


def _spool(spools: contextlib.ExitStack) -> IO[bytes]:
    return spools.enter_context(tempfile.SpooledTemporaryFile(max_size=MEMORY))  # noqa: SIM115 (closed by the caller's ExitStack)


def read_uploads(
    request: Any, path: str, limit: int, spools: contextlib.ExitStack
) -> list[UploadSource]:
    """The request's files; TooLarge past `limit` bytes (after decompression)."""
    kind, options = parse_options_header(request.headers.get("Content-Type", ""))
    body = _spool(spools)
    _copy(request, body, limit + CHUNK)  # multipart framing on top of the files' bytes
    body.seek(0)
    if request.headers.get("Content-Encoding", "").strip().lower() == "gzip":
        body = _gunzipped(body, limit, spools)
    if kind == b"multipart/form-data":
        return _parts(body, options.get(b"boundary", b""), path, limit, spools)
    if not path:
        raise InvalidInput("name the file: ?path=")
    size = body.seek(0, 2)
    if size > limit:
        raise TooLarge(limit)
    body.seek(0)
    return [UploadSource(path=path, stream=body, size=size)]


def _copy(source: Any, target: IO[bytes], limit: int) -> int:
    size = 0
    while chunk := source.read(CHUNK):
        size += len(chunk)
        if size > limit:
            raise TooLarge(limit)
        target.write(chunk)
    return size


def _gunzipped(body: IO[bytes], limit: int, spools: contextlib.ExitStack) -> IO[bytes]:
    plain = _spool(spools)
    try:
        with gzip.GzipFile(fileobj=body, mode="rb") as unzipped:
            _copy(unzipped, plain, limit)
    except (OSError, EOFError) as exc:
        raise InvalidInput(f"the body is not valid gzip: {exc}") from exc
    plain.seek(0)
    return plain


def _parts(
    body: IO[bytes], boundary: bytes, path: str, limit: int, spools: contextlib.ExitStack
) -> list[UploadSource]:
    if not boundary:
        raise InvalidInput("a multipart body needs its boundary")
    found: list[tuple[str, IO[bytes]]] = []
    header: dict[str, bytes] = {"field": b"", "value": b""}
    headers: dict[bytes, bytes] = {}
    current: dict[str, Any] = {}

    def begin() -> None:
        headers.clear()

    def field(data: bytes, start: int, end: int) -> None:
        header["field"] += data[start:end]

    def value(data: bytes, start: int, end: int) -> None:
        header["value"] += data[start:end]

    def header_end() -> None:
        headers[header["field"].lower()] = header["value"]
        header["field"] = header["value"] = b""

    def headers_done() -> None:
        _, options = parse_options_header(headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        filename = options.get(b"filename", b"").decode("utf-8", "replace")
        current["target"] = _spool(spools) if name == "file" else None
        if current["target"] is not None:
            found.append((filename, current["target"]))

    def data(chunk: bytes, start: int, end: int) -> None:
        if current.get("target") is not None:
            current["target"].write(chunk[start:end])

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": begin,
            "on_header_field": field,
            "on_header_value": value,
            "on_header_end": header_end,
            "on_headers_finished": headers_done,
            "on_part_data": data,
        },
    )
    while chunk := body.read(CHUNK):
        parser.write(chunk)
    parser.finalize()
    if not found:
        raise InvalidInput('send each file as a multipart part named "file"')
    uploads = []
    for filename, stream in found:
        size = stream.seek(0, 2)
        stream.seek(0)
        name = path if path and len(found) == 1 else filename
        if not name:
            raise InvalidInput("each file part needs a filename: its path")
        uploads.append(UploadSource(path=name, stream=stream, size=size))
    if sum(u.size for u in uploads) > limit:
        raise TooLarge(limit)
    return uploads
