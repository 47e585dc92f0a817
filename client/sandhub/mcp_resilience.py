"""MCP over streamable HTTP that survives a lost connection: one call fails, the next works.

Why (issue 28): in the MCP SDK's client transport (mcp 2.3, mcp/client/streamable_http.py),
each request's POST runs as a task of the transport's own task group. A transport error
before the response's headers (the web process died holding the request: the connection is
reset, "Server disconnected without sending a response", or refused) is not caught there:
it fails that task group, which closes the session's read stream, and from then on every
call of that session fails at once with "Connection closed" (mcp/shared/jsonrpc_dispatcher
.py). A fastmcp.Client then has to be closed and opened again.

An HTTP error status, by contrast, fails only the request it answers (a JSON-RPC error in
the body is handed to that request's caller). So this module gives the SDK's HTTP client a
transport that turns a connection failure into such an answer: 502 with a JSON-RPC error
that says what happened. The session, its id (and so the platform's selected sandbox) and
every other call carry on; the next request opens a new connection, to whichever web
process answers. A failed call is not repeated: it may have run before the answer was lost.

Use it with any fastmcp.Client:

    Client(resilient_transport(url, key))            # or, for your own transport:
    StreamableHttpTransport(url, auth=key, httpx_client_factory=resilient_http_client)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
from fastmcp.client.transports import StreamableHttpTransport

# MCP's "connection closed" code: the call's answer never came.
CONNECTION_LOST = -32000
# The MCP transports' timeouts (mcp.shared._httpx_utils): answers may stream for long.
_TIMEOUT = httpx.Timeout(30.0, read=300.0)


def lost_message(exc: Exception) -> str:
    return (
        f"the connection to the MCP server was lost before the answer came ({type(exc).__name__}"
        f": {exc or 'no detail'}); the call may or may not have run. Later calls open a new"
        " connection"
    )


class AnswerLost(httpx.StreamError):
    """A response body cut off mid-way (the SDK treats a StreamError as that call's failure)."""


class _GuardedStream(httpx.AsyncByteStream):
    """A response body whose connection failure fails this response only."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except httpx.TransportError as exc:
            raise AnswerLost(lost_message(exc)) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()


class ConnectionLossAsAnswer(httpx.AsyncBaseTransport):
    """An httpx transport: a connection failure becomes a 502 carrying a JSON-RPC error."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.TransportError as exc:
            return _lost_answer(request, exc)
        response.stream = _GuardedStream(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _lost_answer(request: httpx.Request, exc: Exception) -> httpx.Response:
    error = {"code": CONNECTION_LOST, "message": lost_message(exc)}
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    return httpx.Response(
        502, headers={"content-type": "application/json"}, content=body, request=request
    )


def resilient_http_client(
    headers: dict[str, str] | None = None,
    timeout: httpx.Timeout | None = None,
    auth: httpx.Auth | None = None,
    **_ignored: Any,
) -> httpx.AsyncClient:
    """An httpx_client_factory for fastmcp's StreamableHttpTransport (same signature as the
    SDK's create_mcp_http_client; follow_redirects is the SDK's business, so ignored)."""
    return httpx.AsyncClient(
        headers=headers,
        timeout=timeout or _TIMEOUT,
        auth=auth,
        transport=ConnectionLossAsAnswer(),
    )


def resilient_transport(
    url: str, key: str | None, headers: dict[str, str] | None = None
) -> StreamableHttpTransport:
    """The MCP endpoint `url` with API key `key`, surviving lost connections (see above)."""
    return StreamableHttpTransport(
        url, auth=key, headers=headers, httpx_client_factory=resilient_http_client
    )
