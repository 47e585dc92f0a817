"""Counts every MCP tool call by tool and outcome, and times it (sandboxes/metrics).

The outermost middleware (server.py adds it first), so it sees what the agent gets: calls
refused by the argument check or the refusal audit as well as the tools' own answers.

Outcomes:
- ok: the tool answered (a command that exited 1 is an answer too);
- refused: the call never got to do its work: arguments that fail validation, an unknown
  tool, a rate limit, a role or key that may not, a quota;
- tool_error: the tool ran and reported an error the agent can act on (not found, conflict,
  invalid input, the backend failing);
- exception: anything unexpected (the agent sees a masked error).

A tool name the server does not know is counted as "unknown": a client may send any name,
and a label fed by clients would grow a series per name.
"""

from __future__ import annotations

import time
from typing import Any

from fastmcp import FastMCP
from fastmcp.exceptions import NotFoundError, ToolError, ValidationError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext

from sandboxes.contract.errors import QuotaExceeded
from sandboxes.metrics import instruments
from tenants import ratelimits
from tenants.errors import PermissionDenied

UNKNOWN_TOOL = "unknown"
_REFUSALS = (ratelimits.RateLimited, PermissionDenied, QuotaExceeded)


class CallMetrics(Middleware):
    def __init__(self, server: FastMCP) -> None:
        self._server = server
        self._known: set[str] = set()  # tools are fixed once registered

    async def on_call_tool(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        started = time.perf_counter()
        outcome = "exception"
        try:
            result = await call_next(context)
            outcome = "ok"
            return result
        except Exception as exc:
            outcome = outcome_of(exc)
            raise
        finally:
            tool = await self._label(context.message.name)
            instruments.mcp_call(tool, outcome, time.perf_counter() - started)

    async def _label(self, name: str) -> str:
        if name in self._known:
            return name
        try:
            tool = await self._server.get_tool(name)
        except Exception:  # in a `finally`: must not replace the call's own error
            tool = None
        if tool is None:
            return UNKNOWN_TOOL
        self._known.add(name)
        return name


def outcome_of(exc: BaseException) -> str:
    if isinstance(exc, (ValidationError, NotFoundError)):
        return "refused"  # fastmcp's own: bad arguments, no such tool
    seen: BaseException | None = exc
    while seen is not None:  # a service's error travels as the cause of a ToolError
        if isinstance(seen, _REFUSALS):
            return "refused"
        seen = seen.__cause__
    return "tool_error" if isinstance(exc, ToolError) else "exception"
