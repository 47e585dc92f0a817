"""get_sandbox_metrics over streamable HTTP (mcp_bridge/tools_metrics.py): a live sample of
a real Docker sandbox through a real fastmcp.Client with a Bearer key; viewers and read-only
keys may read; another team's key gets "not found"; the tool says it is read-only."""

from __future__ import annotations

import pytest

from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def call(server: str, key: str, args: dict) -> tuple[bool, dict | None, str]:
    async def conversation():
        async with mcp(server, key) as client:
            answer = await client.call_tool("get_sandbox_metrics", args, raise_on_error=False)
            text = "\n".join(getattr(part, "text", "") for part in answer.content)
            return answer.is_error, answer.structured_content, text

    return run(conversation())


def test_a_live_sample_of_a_real_sandbox(asgi_server, world, shared_sandbox) -> None:
    failed, metrics, text = call(
        asgi_server, world.keys["alice"], {"sandbox_id": shared_sandbox, "live": True}
    )
    assert not failed, text
    assert metrics is not None and metrics["sampled_now"] is True
    latest = metrics["latest"]
    assert latest["memory_bytes"] > 0 and latest["pids"] >= 1 and latest["cpu_seconds"] >= 0
    assert metrics["limits"]["memory_bytes"] > 0 and metrics["limits"]["cpus"] > 0
    assert len(metrics["series"]["at"]) >= 1


@pytest.mark.parametrize("key", ["victor", "alice_read"])
def test_viewers_and_read_only_keys_may_read(asgi_server, world, shared_sandbox, key) -> None:
    failed, metrics, text = call(asgi_server, world.keys[key], {"sandbox_id": shared_sandbox})
    assert not failed, text
    assert metrics is not None and metrics["sandbox_id"] == shared_sandbox


def test_another_teams_sandbox_is_not_found(asgi_server, world, shared_sandbox) -> None:
    failed, _, text = call(asgi_server, world.keys["bob"], {"sandbox_id": shared_sandbox})
    assert failed and "not found" in text


def test_the_tool_is_read_only(asgi_server, world) -> None:
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return {tool.name: tool for tool in await client.list_tools()}

    tool = run(conversation())["get_sandbox_metrics"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True
