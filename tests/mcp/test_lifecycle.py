"""pause_sandbox, stop_sandbox and resume_sandbox over MCP (a real fastmcp Client, the live
server, the real Docker engine): the states shown by get_sandbox and list_sandboxes, a
command and a listing resuming the sandbox and saying how long that took, pause and stop
needing sandbox_id. The rules themselves: tests/services/test_lifecycle*.py."""

from __future__ import annotations

import pytest

from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def test_pause_stop_and_resume_through_mcp(asgi_server, world):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            created = (await client.call_tool("create_sandbox", {"memory_mb": 128})).data
            sandbox_id = created.id
            try:
                refused = await client.call_tool("pause_sandbox", {}, raise_on_error=False)
                paused = await client.call_tool("pause_sandbox", {"sandbox_id": sandbox_id})
                shown = await client.call_tool("get_sandbox", {"sandbox_id": sandbox_id})
                listed = await client.call_tool("list_sandboxes", {})
                ran = await client.call_tool(
                    "run_command", {"sandbox_id": sandbox_id, "command": "echo awake"}
                )
                stopped = await client.call_tool("stop_sandbox", {"sandbox_id": sandbox_id})
                listing = await client.call_tool("list_files", {"sandbox_id": sandbox_id})
                again = await client.call_tool("resume_sandbox", {"sandbox_id": sandbox_id})
            finally:
                await client.call_tool("delete_sandbox", {"sandbox_id": sandbox_id})
            return sandbox_id, refused, paused, shown, listed, ran, stopped, listing, again

    sandbox_id, refused, paused, shown, listed, ran, stopped, listing, again = run(conversation())
    assert refused.is_error and "sandbox_id" in refused.content[0].text
    change = paused.structured_content
    assert (change["changed"], change["previous_status"]) == (True, "running")
    assert change["sandbox"]["status"] == "paused" and change["sandbox"]["paused_at"]
    assert shown.structured_content["status"] == "paused"
    mine = [s for s in listed.structured_content["sandboxes"] if s["id"] == sandbox_id]
    assert mine[0]["status"] == "paused" and mine[0]["paused_at"]
    assert ran.structured_content["stdout"] == "awake\n"
    assert ran.structured_content["resumed_seconds"] is not None
    assert stopped.structured_content["sandbox"]["status"] == "stopped"
    assert stopped.structured_content["sandbox"]["stopped_at"]
    assert listing.structured_content["resumed_seconds"] is not None
    assert again.structured_content["changed"] is False  # the listing resumed it already
