"""The small decisions behind /metrics' labels (issue 28): which route group an address is
in, the status class of an app that raised, the outcome an MCP tool call's error counts as.
The live counters are tests/platform/test_metrics_live.py."""

from __future__ import annotations

import asyncio

import pytest
from fastmcp.exceptions import NotFoundError, ToolError, ValidationError

from mcp_bridge.callmetrics import outcome_of
from platform_site.metrics.requests import instrumented, route_group
from sandboxes.contract.errors import BackendFailure, QuotaExceeded
from sandboxes.metrics import instruments
from tenants.errors import NotFound, PermissionDenied
from tenants.ratelimits import RateLimited


@pytest.mark.parametrize(
    "path, group",
    [
        ("/", "pages"),
        ("/sandboxes/sb_x/", "pages"),
        ("/api/v1/sandboxes/", "api"),
        ("/api/docs/", "api"),
        ("/mcp/", "mcp"),
        ("/mcp", "mcp"),
        ("/admin/hosts/host/", "admin"),
        ("/static/web/app.css", "static"),
        ("/metrics", "metrics"),
        ("/metrics/x", "pages"),
        ("/preview/sb_0000abcd0000/8000/", "preview"),
    ],
)
def test_route_groups(path, group):
    scope = {"type": "http", "path": path, "headers": [(b"host", b"testserver")]}
    assert route_group(scope) == group


def _caused(error: Exception, cause: Exception) -> Exception:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "error, outcome",
    [
        (ValidationError("timeout: expected a number"), "refused"),
        (NotFoundError("Unknown tool: x"), "refused"),
        (_caused(ToolError("slow down"), RateLimited("too many", 5)), "refused"),
        (_caused(ToolError("viewers may not"), PermissionDenied("viewers may not")), "refused"),
        (_caused(ToolError("over quota"), QuotaExceeded("over quota")), "refused"),
        (_caused(ToolError("no such sandbox"), NotFound("no such sandbox")), "tool_error"),
        (_caused(ToolError("engine down"), BackendFailure("engine down")), "tool_error"),
        (RuntimeError("a bug"), "exception"),
    ],
)
def test_mcp_outcomes(error, outcome):
    assert outcome_of(error) == outcome


def _five_hundreds() -> float:
    labels = {"method": "read", "route": "pages", "status": "5xx"}
    return instruments.REGISTRY.get_sample_value("sandhub_http_requests_total", labels) or 0.0


def test_an_app_that_raised_counts_as_a_5xx():
    async def broken(scope, receive, send):
        raise RuntimeError("a bug")

    async def nothing(message):
        return None

    before = _five_hundreds()
    scope = {"type": "http", "method": "GET", "path": "/x/", "headers": []}
    with pytest.raises(RuntimeError):
        asyncio.run(instrumented(broken)(scope, None, nothing))
    assert _five_hundreds() == before + 1
