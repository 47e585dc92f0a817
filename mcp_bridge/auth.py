"""Authenticating MCP requests over HTTP: `Authorization: Bearer shk_...`, checked in the DB.

FastMCP calls verify_token once per HTTP request (the endpoint is stateless); None answers
401. The access token carries only the key's id; the row read by the check, with the user's
role, is handed to this request's tools (identity.checked_key), so one query checks a key.
Every request is checked afresh: a revoked key or a removed membership applies to the next.

A key prefix or address locked out after too many failures (tenants/ratelimits.py) is
answered 429 with Retry-After instead: verify_token raises an AuthenticationError that the
authentication middleware hands to `rate_limited_response`.
"""

from __future__ import annotations

import re

from fastmcp.server.auth import AccessToken, TokenVerifier
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from starlette.authentication import AuthenticationError
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

from mcp_bridge import identity
from mcp_bridge.runtime import call
from tenants import apikeys
from tenants.models import ApiKey, Channel
from tenants.ratelimits import RateLimited

KEY_HELP = (
    "Create a key on this server's keys page (/keys/) or with `manage.py create_api_key`, and "
    "send it as `Authorization: Bearer shk_...` (for `sandhub`: SANDHUB_API_KEY or `sandhub "
    "login`)."
)
NO_KEY = "No API key was sent. " + KEY_HELP
NOT_A_KEY = "That is not a Sandhub API key (they look like shk_xxxxxxxx_...). " + KEY_HELP
# One sentence for every key that looks right but is refused: saying which of these it is
# would tell a stranger that a key prefix exists (and what became of it).
REFUSED_KEY = (
    "The API key was refused: it is unknown, revoked or expired, or its user is no longer a "
    "member of its team. Check it, or use another. " + KEY_HELP
)


def refused_key_answer(
    headers: dict[str, str], challenge_headers: list[tuple[bytes, bytes]]
) -> tuple[str, str]:
    """The message for a 401 of the MCP endpoint, and its WWW-Authenticate value: FastMCP's
    challenge (scope, resource metadata) kept, its error_description ("re-register and obtain
    new tokens", written for OAuth clients) replaced by what to do with an API key. Only the
    request's own Authorization header decides which message: nothing about the key."""
    authorization = headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        text, error = NO_KEY, None  # RFC 6750 3.1: no error attribute without credentials
    elif not token.strip().startswith("shk_"):
        text, error = NOT_A_KEY, "invalid_token"
    else:
        text, error = REFUSED_KEY, "invalid_token"
    parts = [f'error="{error}"'] if error else []
    parts.append(f'error_description="{text.replace(chr(34), chr(39))}"')
    parts += _challenge_context(challenge_headers)
    return text, "Bearer " + ", ".join(parts)


def _challenge_context(headers: list[tuple[bytes, bytes]]) -> list[str]:
    """The scope and resource_metadata parameters of FastMCP's own challenge."""
    for name, value in headers:
        if name.lower() == b"www-authenticate":
            found = re.findall(r'(scope|resource_metadata)="([^"]*)"', value.decode("latin-1"))
            return [f'{key}="{found_value}"' for key, found_value in found]
    return []


class LockedOut(AuthenticationError):
    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


def _check(token: str, address: str | None) -> ApiKey | LockedOut | None:
    try:
        key = apikeys.authenticate(token, address=address, channel=Channel.MCP)
    except RateLimited as exc:
        return LockedOut(exc.message, exc.retry_after)
    if key is not None:
        apikeys.touch(key, address)
    return key


def rate_limited_response(conn: HTTPConnection, exc: Exception) -> Response:
    # JSON-RPC error bodies: an MCP client shows their message (bodylimit.py says why).
    if isinstance(exc, LockedOut):
        return JSONResponse(
            _jsonrpc_error(exc.message, "rate_limited"),
            status_code=429,
            headers={"Retry-After": str(exc.retry_after)},
        )
    return JSONResponse(_jsonrpc_error(str(exc), "invalid_request"), 400)


def _jsonrpc_error(message: str, code: str) -> dict:
    """A JSON-RPC error that an OAuth-minded reader also understands (error_description).
    The request's id is not read here (the body is not); the client puts its own back."""
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": message, "data": {"code": code}},
        "error_description": message,
    }


class ApiKeyVerifier(TokenVerifier):
    async def verify_token(self, token: str) -> AccessToken | None:
        key = await call(_check, token, identity.request_address())
        if isinstance(key, LockedOut):
            raise key
        if key is None:
            return None
        identity.checked_key.set(key)
        return AccessToken(
            # The SDK keeps the token on the request; it is never logged or sent back.
            token=token,
            client_id=f"shk_{key.prefix}",
            scopes=list(key.scopes),
            expires_at=int(key.expires_at.timestamp()) if key.expires_at else None,
            claims={"api_key_id": key.pk, "user_id": key.user_id, "team_id": key.team_id},
        )

    def get_middleware(self) -> list:
        """FastMCP's own (TokenVerifier.get_middleware), with the 429 for a lockout."""
        return [
            Middleware(
                AuthenticationMiddleware,
                backend=BearerAuthBackend(self),
                on_error=rate_limited_response,
            ),
            Middleware(AuthContextMiddleware),
        ]
