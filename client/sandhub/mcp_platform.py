"""The platform as `sandhub mcp` (mcp_local.py) reaches it: its MCP endpoint, checked at
start, and the one MCP session the local server keeps there for its whole life.

The session: the platform hands a session id to a handshake-era `initialize` (its
Mcp-Session-Id response header), keeps the session's selected sandbox under it, and honours
the header on any later request whatever its protocol era (the platform's extension; the
2026-07-28 protocol itself has no sessions). DELETE with the header ends it.
"""

from __future__ import annotations

import contextlib

import httpx2 as httpx
from fastmcp.client.transports import StreamableHttpTransport
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from sandhub.mcp_resilience import resilient_transport

SESSION_HEADER = "mcp-session-id"
_TIMEOUT = httpx.Timeout(30.0, connect=10.0)


def endpoint(url: str) -> str:
    return f"{url.rstrip('/')}/mcp/"


def platform_transport(url: str, key: str, session: str | None = None) -> StreamableHttpTransport:
    """The platform's MCP endpoint with the key, in the given platform session if any. A web
    process lost with a forwarded request in hand fails that request only (mcp_resilience):
    the next goes to another one, in the same session (the selected sandbox kept)."""
    headers = {SESSION_HEADER: session} if session else None
    return resilient_transport(endpoint(url), key, headers=headers)


def check_platform(url: str, key: str) -> str | None:
    """Why the platform cannot be used with this key, or None when it can: checked at start,
    so a wrong key or address stops the server with a message (the agent's MCP client shows
    it as failed) instead of leaving a server without tools. REST, not MCP: the MCP client
    reports any refusal as the same "error response", and the sync tools use REST anyway."""
    try:
        response = httpx.get(
            f"{url}/api/v1/sandboxes/",
            params={"limit": 1},
            headers={"Authorization": f"Bearer {key}"},
            timeout=_TIMEOUT,
        )
    except httpx.TransportError as exc:
        return f"cannot connect ({exc.__class__.__name__}: {exc})"
    if response.status_code in (401, 403):
        return (
            "the platform refused the API key (unknown, revoked or expired, or without access):"
            " check SANDHUB_API_KEY or run `sandhub login`"
        )
    if response.status_code >= 400:
        return f"the platform answered HTTP {response.status_code} to {response.request.url}"
    return None


def open_platform_session(url: str, key: str) -> str | None:
    """A new MCP session on the platform for this process: the session id the platform
    hands out in answer to a handshake-era `initialize` (None when it hands out none, or the
    request fails: then there is no session, as before the platform had them)."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "sandhub-mcp", "version": "1"},
        },
    }
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
    }
    try:
        response = httpx.post(endpoint(url), json=initialize, headers=headers, timeout=_TIMEOUT)
    except httpx.TransportError:
        return None
    return response.headers.get(SESSION_HEADER) if response.status_code < 400 else None


def end_platform_session(url: str, key: str, session: str) -> None:
    """Tell the platform the session is over (it forgets its selection); best effort."""
    headers = {"Authorization": f"Bearer {key}", SESSION_HEADER: session}
    with contextlib.suppress(httpx.TransportError):
        httpx.delete(endpoint(url), headers=headers, timeout=_TIMEOUT)
