"""How the MCP server is built: the settings it takes from the environment."""

from __future__ import annotations

from collections.abc import Iterator

import fastmcp
import pytest
from django.test import override_settings
from fastmcp.telemetry import native_spans_enabled

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
