"""A command killed for memory, as MCP (a real fastmcp.Client over streamable HTTP) and REST
(in-process APIClient) show it: exit 137, the note in stderr, out_of_memory true; and a
background job's check says it too (real Docker engine, a 128 MB sandbox)."""

from __future__ import annotations

import asyncio
import time

import pytest
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.contract.outcomes import OOM_NOTE
from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]
GREEDY = "python3 -c 'b = [bytearray(16 << 20) for _ in range(64)]'"


@pytest.fixture(scope="module")
def small_sandbox(world):
    principal = world.principal()
    info = services.create_sandbox(principal, memory_mb=128)
    yield info.id
    services.delete_sandbox(principal, info.id)


def test_mcp_says_a_command_ran_out_of_memory(asgi_server, world, small_sandbox):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            ran = await client.call_tool(
                "run_command", {"sandbox_id": small_sandbox, "command": GREEDY}
            )
            started = await client.call_tool(
                "start_background", {"sandbox_id": small_sandbox, "command": GREEDY}
            )
            task = {"sandbox_id": small_sandbox, "task_id": started.structured_content["task_id"]}
            deadline = time.monotonic() + 60
            while True:
                check = (await client.call_tool("check_background", task)).structured_content
                if not check["running"] or time.monotonic() > deadline:
                    return ran.structured_content, check
                await asyncio.sleep(0.2)

    ran, check = run(conversation())
    assert ran["exit_code"] == 137 and ran["out_of_memory"] is True, ran
    assert OOM_NOTE in ran["stderr"]
    assert check["exit_code"] == 137 and check["out_of_memory"] is True, check
    assert OOM_NOTE in check["output"]


def test_rest_says_a_command_ran_out_of_memory(world, small_sandbox):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys['alice']}")
    url = f"/api/v1/sandboxes/{small_sandbox}/commands/"
    body = client.post(url, {"command": GREEDY}, format="json").json()
    assert body["exit_code"] == 137 and body["out_of_memory"] is True, body
    plain = client.post(url, {"command": "kill -9 $$"}, format="json").json()
    assert plain["exit_code"] == 137 and plain["out_of_memory"] is False, plain
