"""tools/list answered from schemas dereferenced once.

FastMCP inlines every `$ref` of the tools' schemas for clients that cannot follow them
(`dereference_schemas=True`, its default), anew on every tools/list: about 17 ms of CPU for
the 33 tools here. Every MCP client lists the tools when it connects, and the MCP SDK's
client does so again inside its first call_tool (to validate structured output), so a burst
of 50 agents starting at once spent some 0.85 CPU-seconds of the web processes on the same
33 schemas. The tools are fixed once registered (the listing returns the same objects every
time), so each is dereferenced the first time it is listed and kept.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import mcp_types as mt
from fastmcp.server.middleware.dereference import DereferenceRefsMiddleware, _dereference_tool
from fastmcp.server.middleware.middleware import CallNext, MiddlewareContext
from fastmcp.tools.base import Tool


class DereferenceOnce(DereferenceRefsMiddleware):
    """FastMCP's DereferenceRefsMiddleware, memoized per registered tool object (the entry
    keeps the original alive, so its id cannot be reused by another object)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[int, tuple[Tool, Tool]] = {}

    async def on_list_tools(
        self,
        context: MiddlewareContext[mt.ListToolsRequest],
        call_next: CallNext[mt.ListToolsRequest, Sequence[Tool]],
    ) -> Sequence[Tool]:
        return [self.dereferenced(tool) for tool in await call_next(context)]

    def dereferenced(self, tool: Tool) -> Tool:
        entry = self._done.get(id(tool))
        if entry is not None and entry[0] is tool:
            return entry[1]
        result = _dereference_tool(tool)
        with self._lock:
            self._done[id(tool)] = (tool, result)
        return result
