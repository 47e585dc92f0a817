"""Authenticating MCP requests over HTTP: `Authorization: Bearer shk_...`, checked in the DB.

FastMCP calls verify_token once per HTTP request (the endpoint is stateless); None answers
401. The access token carries only the key's id: tools load the key afresh (identity.py), so
a revoked key or a removed membership applies to the very next request.
"""

from __future__ import annotations

from fastmcp.server.auth import AccessToken, TokenVerifier

from mcp_bridge import identity
from mcp_bridge.runtime import call
from tenants import apikeys
from tenants.models import ApiKey


def _check(token: str, address: str | None) -> ApiKey | None:
    key = apikeys.authenticate(token, address=address)
    if key is not None:
        apikeys.touch(key, address)
    return key


class ApiKeyVerifier(TokenVerifier):
    async def verify_token(self, token: str) -> AccessToken | None:
        key = await call(_check, token, identity.request_address())
        if key is None:
            return None
        return AccessToken(
            # The SDK keeps the token on the request; it is never logged or sent back.
            token=token,
            client_id=f"shk_{key.prefix}",
            scopes=list(key.scopes),
            expires_at=int(key.expires_at.timestamp()) if key.expires_at else None,
            claims={"api_key_id": key.pk, "user_id": key.user_id, "team_id": key.team_id},
        )
