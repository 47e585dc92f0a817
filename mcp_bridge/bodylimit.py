"""The MCP endpoint's refusals before any tool runs, answered as JSON-RPC errors an MCP client
shows: a request body over the limit (413) and a missing or refused API key (401).

The MCP SDK's streamable-HTTP transport refuses a body over 4 MiB itself
(mcp.server.transport_security.RequestBodyLimitMiddleware, DEFAULT_MAX_REQUEST_BODY_SIZE) with a
plain-text 413, and FastMCP's RequireAuthMiddleware answers 401 with an OAuth text ("re-register
and obtain new tokens") meant for OAuth clients. An MCP client only surfaces a non-2xx answer's
text when its body is a JSON-RPC error; otherwise it says "Server returned an error response".
So this ASGI wrapper, in front of the MCP app (platform_site/asgi.py), rewrites those two
answers on their way out, and answers a body whose declared length is over the limit itself,
before reading it. It never buffers a body: it keeps the first bytes that pass through, to
name the request's id in the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

from mcp_bridge.auth import refused_key_answer

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

LIMIT_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE  # what the SDK enforces
INVALID_REQUEST = -32600  # JSON-RPC
_HEAD_BYTES = 512  # the JSON-RPC id comes right after "jsonrpc" in what clients send
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')

TOO_LARGE = (
    "The request is larger than the MCP endpoint takes: at most 4 MiB (4,194,304 bytes) per "
    "request, which is about 3 MB of file content per call once base64 and JSON are added "
    "(text content counts as it is, binary as base64, a third larger). Send big files in parts "
    "(several upload_files or write_file calls), or use the REST API's streaming upload "
    "(POST /api/v1/sandboxes/{id}/files/?path=..., up to the transfer limit) or `sandhub cp`."
)


def with_clear_refusals(app: App) -> App:
    """The MCP app, its 413 and 401 answers made JSON-RPC errors that say what to do."""

    async def guarded(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request = _Request(scope, receive)
        if request.declared_length() > LIMIT_BYTES:
            await request.refuse_too_large(send)
            return
        await app(scope, request.receive, _rewriting(request, send))

    return guarded


class _Request:
    """One HTTP request: its headers, and the head of its body as it passes through."""

    def __init__(self, scope: MutableMapping[str, Any], receive: Receive) -> None:
        self.headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", [])
        }
        self._receive = receive
        self.head = b""
        self.path = str(scope.get("path", ""))

    def declared_length(self) -> int:
        try:
            return int(self.headers.get("content-length", "0"))
        except ValueError:
            return 0

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request" and len(self.head) < _HEAD_BYTES:
            self.head += bytes(message.get("body", b""))[: _HEAD_BYTES - len(self.head)]
        return message

    def request_id(self) -> int | str | None:
        found = _ID.search(self.head)
        if found is None:
            return None
        try:
            value = json.loads(found.group(1))
        except ValueError:
            return None
        return value if isinstance(value, int | str) else None

    async def refuse_too_large(self, send: Send) -> None:
        # The first chunk the server already holds names the id; reading it costs nothing
        # more, unless the client waits for "100 Continue" before sending the body at all.
        if "100-continue" not in self.headers.get("expect", "").lower():
            await self.receive()
        await _answer(send, 413, self.too_large_error(), [])

    def too_large_error(self) -> dict[str, Any]:
        return _jsonrpc_error(self.request_id(), TOO_LARGE, {"limit_bytes": LIMIT_BYTES})


def _rewriting(request: _Request, send: Send) -> Send:
    """`send`, with the SDK's 413 and FastMCP's 401 answers replaced by ours."""
    replacing: list[bool] = [False]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and _replaced(message):
            replacing[0] = True
            if message["status"] == 413:
                await _answer(send, 413, request.too_large_error(), [])
            else:
                text, challenge = refused_key_answer(request.headers, message.get("headers", []))
                error = _jsonrpc_error(request.request_id(), text, {"http_status": 401})
                error["error_description"] = text  # as FastMCP's body had it, for OAuth readers
                await _answer(send, 401, error, [(b"www-authenticate", challenge.encode())])
            return
        if replacing[0] and message["type"] == "http.response.body":
            return  # the replaced answer's own body
        await send(message)

    return sending


def _replaced(start: Message) -> bool:
    """The SDK's 413, or FastMCP's 401 (which carries its Bearer challenge)."""
    if start["status"] == 413:
        return True
    headers = start.get("headers", [])
    return start["status"] == 401 and any(
        name.lower() == b"www-authenticate" for name, _ in headers
    )


def _jsonrpc_error(request_id: int | str | None, message: str, data: dict) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": INVALID_REQUEST, "message": message, "data": data},
    }


async def _answer(send: Send, status: int, body: dict, headers: list[tuple[bytes, bytes]]) -> None:
    encoded = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(encoded)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": encoded})
