"""SANDHUB_MCP_TRACING (mcp_bridge/tracing.py): a web process (scripts/web.sh) exports a span
per MCP tool call, with service calls as child spans, over OTLP/HTTP to the receiver the test
runs on loopback: tool name, team id and outcome, never an argument's contents or the key.
Off, the same process sends nothing at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastmcp.exceptions import ToolError

from tests.live import free_port, mcp, run
from tests.mcp.otlp_receiver import OtlpReceiver
from tests.mcp.webfleet import WebProcess, start_web

MARKER = "sb_doesnotexist7"  # an argument's value: no span may carry it


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as started:
        yield started


def traced_web(receiver: OtlpReceiver, log: Path, tracing: str) -> WebProcess:
    return start_web(
        free_port(),
        log,
        SANDHUB_MCP_TRACING=tracing,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",  # ms: export soon after the call
        OTEL_SERVICE_NAME="sandhub-web-test",
    )


async def two_calls(web: WebProcess, key: str) -> None:
    async with mcp(web.url, key) as client:
        await client.call_tool("list_sandboxes", {})
        with pytest.raises(ToolError):
            await client.call_tool("get_sandbox", {"sandbox_id": MARKER})


def test_tracing_on_exports_a_span_per_call_with_service_children(receiver, world, tmp_path: Path):
    web = traced_web(receiver, tmp_path / "web.log", "true")
    try:
        run(two_calls(web, world.keys["alice"]))
        listed = receiver.wait_for("mcp.tool list_sandboxes")
        refused = receiver.wait_for("mcp.tool get_sandbox")
    finally:
        web.stop()
    assert listed.attributes == {
        "gen_ai.tool.name": "list_sandboxes",
        "mcp.method.name": "tools/call",
        "sandhub.team.id": world.team_a.pk,
        "sandhub.outcome": "ok",
    }
    assert refused.attributes["sandhub.outcome"] == "tool_error"
    assert refused.attributes["error.type"] == "ToolError"
    assert listed.resource["service.name"] == "sandhub-web-test"
    below = [span.name for span in descendants(receiver, listed)]
    assert "tools/call list_sandboxes" in below  # FastMCP's own span
    assert any(name.startswith("service ") for name in below), below
    sent = b"".join(receiver.bodies)
    assert MARKER.encode() not in sent
    assert world.keys["alice"].encode() not in sent


def descendants(receiver: OtlpReceiver, root) -> list:
    found, ids = [], {root.span_id}
    for _ in range(5):  # spans arrive in any order; the trees here are shallow
        for span in receiver.spans:
            if span.parent_id in ids and span not in found:
                found.append(span)
                ids.add(span.span_id)
    return found


def test_tracing_off_sends_nothing(receiver, world, tmp_path: Path):
    web = traced_web(receiver, tmp_path / "web.log", "false")
    try:
        run(two_calls(web, world.keys["alice"]))
    finally:
        web.stop()  # a provider would flush its spans as the process exits
    assert web.process.returncode is not None
    assert receiver.bodies == []


def test_tracing_off_a_service_call_gets_one_shared_no_op():
    """runtime.call asks for a span around every service call: off, that is a flag check."""
    from mcp_bridge import tracing

    assert not tracing.enabled()  # the test process never turns it on
    assert tracing.service_span(len) is tracing.service_span(print)
