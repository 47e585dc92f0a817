"""Who is calling an MCP tool: the API key of the HTTP request, or the stdio process's key,
and the MCP session the call belongs to (its selected sandbox lives there).

Called inside worker threads (it uses the ORM). Over HTTP the key was checked by
auth.ApiKeyVerifier for this very request; over stdio the process's key is checked again on
every call, so revoking it or removing the membership stops a running stdio server too.

The session: over HTTP, the Mcp-Session-Id the request carries (sessions.py hands one out to
every handshake-era client, and honours one on any request, whatever its protocol era);
none when the request has none. Over stdio, one session per process.
"""

from __future__ import annotations

import secrets
from contextvars import ContextVar
from dataclasses import dataclass

from django.conf import settings
from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_access_token, get_http_request
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER

from sandboxes.services import selection
from tenants import apikeys
from tenants.models import ApiKey, Channel
from tenants.principal import Principal

_process_key: str | None = None  # set by `manage.py mcp` (stdio)
_process_session: str | None = None  # that process's one MCP session

# The key row auth.ApiKeyVerifier read for this HTTP request. The request's tools run in
# tasks spawned inside it (the MCP SDK's stateless transport), which copy its context, as
# they do for the SDK's own access token; a tool reads the row from here instead of again.
checked_key: ContextVar[ApiKey | None] = ContextVar("sandhub_checked_key", default=None)

NO_SELECTION = (
    "no sandbox_id given and no sandbox is selected in this MCP session: pass sandbox_id "
    "(create_sandbox returned it; list_sandboxes shows them all), or select_sandbox first. "
    "A selection belongs to one session and is forgotten after {hours} hours without use"
)
INVALID_KEY = "this API key is no longer valid (revoked, expired, or its user left the team)"


@dataclass(frozen=True)
class Caller:
    key: ApiKey
    principal: Principal
    session: str | None = None  # the MCP session's id, if the call has one

    def sandbox(self, sandbox_id: str | None) -> str:
        """The named sandbox, else the one selected in this call's session."""
        if sandbox_id:
            return sandbox_id
        if self.session is None:
            raise ToolError(f"no sandbox_id given: {selection.NO_SESSION}")
        selected = self.selected()
        if not selected:
            raise ToolError(NO_SELECTION.format(hours=settings.SANDHUB_MCP_SESSION_HOURS))
        return selected

    def selected(self) -> str:
        """The id of the sandbox selected in this call's session ("" if none)."""
        return selection.selected_sandbox(self.principal, self.key.pk, self.session)


def use_process_key(raw: str | None) -> None:
    """Act with this key over stdio, in a session of this process's own."""
    global _process_key, _process_session
    _process_key = raw
    _process_session = secrets.token_urlsafe(32) if raw is not None else None


def request_session() -> str | None:
    """The call's MCP session: the HTTP request's Mcp-Session-Id, or the stdio process's."""
    try:
        headers = get_http_request().headers
    except RuntimeError:  # stdio
        return _process_session
    return headers.get(MCP_SESSION_ID_HEADER) or None


def request_address() -> str | None:
    try:
        client = get_http_request().client
    except RuntimeError:  # stdio: there is no HTTP request
        return None
    return client.host if client else None


def request_base_url() -> str | None:
    try:
        return str(get_http_request().base_url)
    except RuntimeError:
        return None


def caller() -> Caller:
    token = get_access_token()
    address = request_address()
    if token is not None:
        key = _request_key(token.claims.get("api_key_id"))
        if key is None:
            raise ToolError(INVALID_KEY)
    elif _process_key is not None:
        key = apikeys.authenticate(_process_key, channel=Channel.MCP)
        if key is None:
            raise ToolError(INVALID_KEY)
        apikeys.touch(key, None)
    else:
        raise ToolError("not authenticated: send Authorization: Bearer <API key>")
    principal = apikeys.principal_for(key, Channel.MCP, address)
    return Caller(key=key, principal=principal, session=request_session())


def known_key() -> ApiKey | None:
    """The row of the key this call came with, NOT checked again (for the record of a refused
    call): the access token's key over HTTP, the process key's over stdio."""
    token = get_access_token()
    if token is not None:
        return _token_key(token.claims.get("api_key_id"))
    if _process_key is None:
        return None
    prefix = _process_key.split("_")[1] if _process_key.count("_") >= 2 else ""
    return ApiKey.objects.select_related("user", "team").filter(prefix=prefix).first()


def _request_key(key_id: int | None) -> ApiKey | None:
    """The key this request was checked with (its row from the check), else read again."""
    key = checked_key.get()
    if key is not None and key.pk == key_id:
        return key
    return _token_key(key_id)


def _token_key(key_id: int | None) -> ApiKey | None:
    if key_id is None:
        return None
    return ApiKey.objects.select_related("user", "team").filter(pk=key_id).first()
