"""The snapshot tools over streamable HTTP (mcp_bridge/tools_snapshots.py): snapshot_sandbox,
list_snapshots, create_sandbox with snapshot_id, fork_sandbox, delete_snapshot. A live
uvicorn serving platform_site.asgi, a real fastmcp.Client with a Bearer key, the real Docker
engine behind the services."""

from __future__ import annotations

import pytest

from sandboxes import services
from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def text_of(result) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


def test_snapshot_start_from_fork_and_delete(asgi_server, world, shared_sandbox):
    alice = world.principal()
    services.write_file(alice, shared_sandbox, "kept/notes.txt", "before the snapshot\n")

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            args = {"sandbox_id": shared_sandbox, "name": "mcp snapshot"}
            snap = (await client.call_tool("snapshot_sandbox", args)).structured_content
            listed = (await client.call_tool("list_snapshots", {})).structured_content
            made = await client.call_tool("create_sandbox", {"snapshot_id": snap["id"]})
            fork = await client.call_tool("fork_sandbox", {"sandbox_id": shared_sandbox})
            refused = await client.call_tool(
                "delete_snapshot", {"snapshot_id": "snap_0000ghost000"}, raise_on_error=False
            )
            gone = await client.call_tool("delete_snapshot", {"snapshot_id": snap["id"]})
            return snap, listed, made.structured_content, fork.structured_content, refused, gone

    snap, listed, made, fork, refused, gone = run(conversation())
    try:
        assert snap["status"] == "ready" and snap["sandbox_id"] == shared_sandbox
        assert [s["id"] for s in listed["snapshots"]] == [snap["id"]]
        for sandbox in (made, fork["sandbox"]):
            read = services.read_file(alice, sandbox["id"], "kept/notes.txt")
            assert read.content == b"before the snapshot\n"
        assert fork["snapshot"] is None  # the fork's own snapshot is not kept
        assert refused.is_error and "snapshot snap_0000ghost000 not found" in text_of(refused)
        assert gone.structured_content["status"] == "deleted"
        assert services.list_snapshots(alice) == []
    finally:
        for sandbox in (made, fork["sandbox"]):
            services.delete_sandbox(alice, sandbox["id"])
