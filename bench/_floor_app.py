"""The smallest FastMCP server over streamable HTTP: one tool that does nothing, no auth, no
database. bench_mcp_floor.py serves it with the same uvicorn options as the platform, to
measure what the MCP stack alone costs a tools/call on this machine."""

from __future__ import annotations

import fastmcp
from fastmcp import FastMCP

# As the platform serves MCP by default (SANDHUB_MCP_TRACING off): no OpenTelemetry spans.
fastmcp.settings.telemetry_mode = "off"

mcp = FastMCP("floor")


@mcp.tool
def ping() -> str:
    """Answer at once."""
    return "pong"


application = mcp.http_app(path="/mcp/", stateless_http=True)
