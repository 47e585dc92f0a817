"""Who is calling an MCP tool: the API key of the HTTP request, or the stdio process's key.

Called inside worker threads (it uses the ORM). Over HTTP the key was checked by
auth.ApiKeyVerifier for this very request; over stdio the process's key is checked again on
every call, so revoking it or removing the membership stops a running stdio server too.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from fastmcp.exceptions import ToolError
from fastmcp.server.dependencies import get_access_token, get_http_request

from tenants import apikeys
from tenants.models import ApiKey, Channel
from tenants.principal import Principal

_process_key: str | None = None  # set by `manage.py mcp` (stdio)

# The key row auth.ApiKeyVerifier read for this HTTP request. The request's tools run in
# tasks spawned inside it (the MCP SDK's stateless transport), which copy its context, as
# they do for the SDK's own access token; a tool reads the row from here instead of again.
checked_key: ContextVar[ApiKey | None] = ContextVar("sandhub_checked_key", default=None)

NO_SANDBOX = (
    "no sandbox_id given and no sandbox is selected: pass sandbox_id, or call "
    "select_sandbox (create_sandbox selects the new sandbox by default)"
)
INVALID_KEY = "this API key is no longer valid (revoked, expired, or its user left the team)"


@dataclass(frozen=True)
class Caller:
    key: ApiKey
    principal: Principal

    def sandbox(self, sandbox_id: str | None) -> str:
        """The named sandbox, else the key's selected one."""
        if sandbox_id:
            return sandbox_id
        if self.key.selected_sandbox:
            return self.key.selected_sandbox
        raise ToolError(NO_SANDBOX)


def use_process_key(raw: str | None) -> None:
    global _process_key
    _process_key = raw


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
    return Caller(key=key, principal=apikeys.principal_for(key, Channel.MCP, address))


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
