"""How the MCP server is built: the settings it takes from the environment."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import fastmcp
import pytest
from django.test import override_settings
from fastmcp import Client
from fastmcp.server.middleware.dereference import _dereference_tool
from fastmcp.telemetry import native_spans_enabled

from mcp_bridge.listing import DereferenceOnce
from mcp_bridge.server import build_server


@pytest.fixture
def telemetry_mode() -> Iterator[None]:
    """fastmcp.settings is the process's: put back what the rest of the suite runs with."""
    before = fastmcp.settings.telemetry_mode
    yield
    fastmcp.settings.telemetry_mode = before


def test_no_tracing_by_default_fastmcp_opens_no_spans(telemetry_mode):
    fastmcp.settings.telemetry_mode = "native"  # FastMCP's own default
    build_server()
    assert fastmcp.settings.telemetry_mode == "off"
    assert not native_spans_enabled()  # what FastMCP's span helpers ask before each span


@override_settings(SANDHUB_MCP_TRACING=True)
def test_tracing_on_hands_spans_to_opentelemetry(telemetry_mode):
    fastmcp.settings.telemetry_mode = "off"
    build_server()
    assert fastmcp.settings.telemetry_mode == "native"
    assert native_spans_enabled()


def test_tools_listed_with_refs_inlined_once_each_as_fastmcp_would():
    """listing.py: the listing a client gets is FastMCP's own dereferencing, computed once."""
    server = build_server()
    registered = asyncio.run(server.list_tools(run_middleware=False))
    assert any("$defs" in json.dumps(tool.parameters) for tool in registered)  # not vacuous

    async def list_twice():
        async with Client(server) as client:
            return await client.list_tools(), await client.list_tools()

    first, second = asyncio.run(list_twice())
    assert first == second
    assert "$ref" not in json.dumps([tool.model_dump() for tool in first])
    expected = {tool.name: _dereference_tool(tool).to_mcp_tool() for tool in registered}
    assert {tool.name: tool.input_schema for tool in first} == {
        name: tool.input_schema for name, tool in expected.items()
    }
    assert {tool.name: tool.output_schema for tool in first} == {
        name: tool.output_schema for name, tool in expected.items()
    }
    memo = next(m for m in server.middleware if isinstance(m, DereferenceOnce))
    assert memo.dereferenced(registered[0]) is memo.dereferenced(registered[0])
