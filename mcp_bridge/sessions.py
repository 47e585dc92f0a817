"""MCP sessions over the stateless streamable-HTTP endpoint: ids handed out, and ended.

The endpoint is stateless (any web process answers any request), yet an agent's selected
sandbox must belong to its own session, not to the API key that other agents may share. So
this ASGI middleware, inside the API-key check (server.http_app), gives sessions to the
clients that have them, and the selection is kept in the database under the session's id
(sandboxes/services/selection.py):

- A POST of the handshake era (no MCP-Protocol-Version header, or one of the initialize
  handshake's versions, up to 2025-11-25) that carries no Mcp-Session-Id gets a fresh random
  one in the response's Mcp-Session-Id header. Such clients keep the id their `initialize`
  was answered with and send it on every later request. Nothing is stored until the session
  selects something.
- Any request that carries an Mcp-Session-Id is served in that session, whatever its
  protocol era: the platform's extension, which `sandhub mcp` uses to keep one session per
  process although it speaks 2026-07-28 to the platform. The MCP SDK's stateless transport
  ignores the header (it checks session ids only when it made them itself).
- DELETE with an Mcp-Session-Id ends the session (its selection is forgotten): 204.
- GET is answered 405: the endpoint offers no server-to-client stream (as the spec allows);
  a client with a session id otherwise opens one and the stateless transport would hold it
  open forever.

The 2026-07-28 protocol has no sessions at all: its clients, unless they send the header,
select nothing and name the sandbox in every call.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_bridge import identity, logcontext
from mcp_bridge.runtime import call
from sandboxes.services import selection
from tenants import apikeys
from tenants.models import Channel

# What the SDK accepts as a session id (visible ASCII), and not longer than a header needs.
_VALID_ID = re.compile(r"[\x21-\x7E]{1,256}")
_SESSION = MCP_SESSION_ID_HEADER.encode()
_VERSION = MCP_PROTOCOL_VERSION_HEADER.lower().encode()


def new_session_id() -> str:
    return secrets.token_urlsafe(32)


class McpSessions:
    """The ASGI middleware described above, around the MCP SDK's streamable-HTTP app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw = headers.get(_SESSION)
        session = raw.decode("latin-1") if raw is not None else None
        if session is not None and not _VALID_ID.fullmatch(session):
            await _error(400, "Mcp-Session-Id must be 1 to 256 visible ASCII characters")(
                scope, receive, send
            )
            return
        method = scope.get("method", "")
        if method == "POST" and session is None and _handshake_era(headers.get(_VERSION)):
            session = new_session_id()
            logcontext.bind(mcp_session=session)
            await self.app(scope, receive, _handing_out(send, session))
            return
        if session is not None:
            logcontext.bind(mcp_session=session)
        user = scope.get("user")
        if method in ("GET", "DELETE") and isinstance(user, AuthenticatedUser):
            if method == "GET":
                await _error(405, "this server offers no SSE stream", allow="POST, DELETE")(
                    scope, receive, send
                )
                return
            if session is not None and await _end(user, session, scope):
                await Response(status_code=204)(scope, receive, send)
                return
        # Everything else, and every unauthenticated request (the SDK's 401), as it came.
        await self.app(scope, receive, send)


def _handshake_era(version: bytes | None) -> bool:
    return version is None or version.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS


def _handing_out(send: Send, session: str) -> Send:
    """send, with the new session id on a response that is no error."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] < 400:
            message = {
                **message,
                "headers": [*message.get("headers", []), (_SESSION, session.encode())],
            }
        await send(message)

    return sending


async def _end(user: AuthenticatedUser, session: str, scope: Scope) -> bool:
    """Forget the session of the request's key; False when that key's row is not at hand."""
    key = identity.checked_key.get()
    if key is None or key.pk != (user.access_token.claims or {}).get("api_key_id"):
        return False
    client = scope.get("client")
    principal = apikeys.principal_for(key, Channel.MCP, client[0] if client else None)
    await call(selection.end_session, principal, key.pk, session)
    return True


def _error(status: int, message: str, allow: str | None = None) -> Response:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": None}
    body["error"] = {"code": -32600, "message": message}
    headers = {"Allow": allow} if allow else None
    return JSONResponse(body, status_code=status, headers=headers)
