"""One audit row for every MCP call refused before a service ran.

The services write a row for every call that reaches them; a tool call can also be refused
before that: its arguments fail validation (FastMCP checks them against the tool's signature
before the tool runs), the tool does not exist, no sandbox is selected. This middleware
counts the audit rows each tool call or resource read writes and, when the call failed
without one, writes a request.refused row. Refusals of a rate limit are left out: the limit's
own row summarises them.
"""

from __future__ import annotations

from typing import Any

from fastmcp.exceptions import NotFoundError, ValidationError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext

from mcp_bridge import identity
from mcp_bridge.runtime import call
from tenants import apikeys, ratelimits
from tenants.errors import ServiceError
from tenants.models import Channel
from tenants.principal import Principal


class RefusalAudit(Middleware):
    async def on_call_tool(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        return await self._watched(f"tool {context.message.name}", context, call_next)

    async def on_read_resource(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        return await self._watched(f"resource {context.message.uri}", context, call_next)

    @staticmethod
    async def _watched(target: str, context: MiddlewareContext, call_next: CallNext) -> Any:
        with ratelimits.watching_audit_rows() as watch:
            try:
                return await call_next(context)
            except Exception as exc:
                if not watch.rows and not _rate_limited(exc):
                    await call(_record, target, _outcome(exc), str(exc), watch)
                raise


def _rate_limited(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ratelimits.RateLimited):
            return True
        seen = seen.__cause__
    return False


def _outcome(exc: Exception) -> str:
    """The refusal's kind: invalid arguments, an unknown tool, or the code of the service
    error a tool turned into its own (e.g. a file's content that is no base64)."""
    if isinstance(exc, ValidationError):
        return "invalid"
    if isinstance(exc, NotFoundError):
        return "not_found"
    if isinstance(exc.__cause__, ServiceError):
        return exc.__cause__.code
    return "refused"


def _record(target: str, outcome: str, error: str, watch: ratelimits.RowWatch) -> None:
    ratelimits.record_refusal(_acting(), target, outcome, error, watch)


def _acting() -> Principal:
    """The caller by its key, if there is one (not checked again: over HTTP it was checked
    for this request, and a stdio key that fails now has written its own row)."""
    address = identity.request_address()
    key = identity.known_key()
    if key is None:
        return ratelimits.anonymous(Channel.MCP, address)
    return apikeys.principal_for(key, Channel.MCP, address)
