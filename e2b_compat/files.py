"""envd's file transfer over plain HTTP, as E2B's SDKs use it for files.read and files.write:
GET /files?path=P streams the file's bytes; POST /files writes one file from an
`application/octet-stream` body (path in the query), or one or more from a multipart body (a
part named "file" per file, its filename the path). Answers E2B's WriteInfo list; errors as
envd's `{"code": <status>, "message": ...}`. Through Sandhub's file services, as the access
token's key's user.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from e2b_compat.auth import Caller, envd_caller
from e2b_compat.connect import ConnectError
from e2b_compat.envd import sandbox_of
from e2b_compat.errors import api_error, rest_error
from e2b_compat.uploads import TooLarge, read_uploads
from sandboxes import services
from sandboxes.contract.errors import InvalidInput
from sandboxes.http.dbthreads import in_db_thread
from tenants.apikeys import clean_address

__all__ = ["files"]


@csrf_exempt
async def files(request: HttpRequest) -> HttpResponseBase:
    try:
        caller = await in_db_thread(
            envd_caller,
            request.headers.get("X-Access-Token"),
            sandbox_of(request),
            clean_address(request.META.get("REMOTE_ADDR")),
        )
        if request.method == "GET":
            return await _download(caller, sandbox_of(request), request.GET.get("path", ""))
        if request.method == "POST":
            written = await in_db_thread(_upload, caller, sandbox_of(request), request)
            return JsonResponse(written, safe=False)
        return api_error(405, f"{request.method} is not allowed on /files")
    except TooLarge as exc:
        return api_error(413, str(exc))
    except Exception as exc:
        answer = rest_error(exc) or _connect_refusal(exc)
        if answer is None:
            raise
        return answer


def _connect_refusal(exc: Exception) -> HttpResponse | None:
    if isinstance(exc, ConnectError):
        return api_error(exc.status, exc.message)
    return None


async def _download(caller: Caller, sandbox_id: str, path: str) -> HttpResponseBase:
    if not path:
        raise InvalidInput("name the file: ?path=")
    stream = await in_db_thread(services.open_file_stream, caller.principal, sandbox_id, path)

    async def body() -> AsyncIterator[bytes]:
        chunks = iter(stream)
        try:
            while True:
                chunk = await asyncio.to_thread(next, chunks, None)
                if chunk is None:
                    return
                yield chunk
        finally:
            await asyncio.to_thread(stream.close)

    return StreamingHttpResponse(body(), content_type="application/octet-stream")


def _upload(caller: Caller, sandbox_id: str, request: HttpRequest) -> list[dict[str, Any]]:
    limit = settings.SANDHUB_MAX_TRANSFER_BYTES
    with contextlib.ExitStack() as spools:
        uploads = read_uploads(request, request.GET.get("path", ""), limit, spools)
        result = services.upload_files(caller.principal, sandbox_id, uploads)
    return [
        {"name": posixpath.basename(path), "type": "file", "path": path} for path in result.paths
    ]
