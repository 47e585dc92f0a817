"""Issue 28: `sandhub mcp` carries on when the web process holding a forwarded request dies
(kill -9): that one call fails with a message saying the answer was lost, the next is served
by the web process now at the address, in the same platform session (the agent's selected
sandbox kept). The web processes: tests/mcp/webfleet.py (frozen before the request reaches
the first, so it dies with the request in hand and no race)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastmcp.exceptions import ToolError

from tests.client.helpers import local_server
from tests.live import free_port, run
from tests.mcp.webfleet import WebProcess, request_waiting, start_web

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


@pytest.fixture
def webs(world, tmp_path: Path) -> Iterator[list[WebProcess]]:
    started = [start_web(free_port(), tmp_path / "web.log")]
    yield started
    for web in started:
        web.stop()


def test_one_forwarded_call_fails_and_the_next_is_served_in_the_same_session(
    webs, world, shared_sandbox, tmp_path: Path
):
    first = webs[0]

    async def conversation():
        async with local_server(first.url, world.keys["alice"], [tmp_path], tmp_path) as agent:
            await agent.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            first.freeze()
            call = asyncio.create_task(agent.call_tool("get_active_sandbox", {}))
            deadline = time.monotonic() + 30
            while not request_waiting(first.port):
                assert time.monotonic() < deadline and not call.done(), "never reached it"
                await asyncio.sleep(0.01)
            first.kill()
            with pytest.raises(ToolError) as failed:
                await call
            webs.append(await asyncio.to_thread(start_web, first.port, tmp_path / "web.log"))
            later = [await agent.call_tool("get_active_sandbox", {}) for _ in range(2)]
            return str(failed.value), later

    failure, later = run(conversation())
    assert "connection to the MCP server was lost" in failure
    assert [result.structured_content["sandbox"]["id"] for result in later] == [shared_sandbox] * 2
