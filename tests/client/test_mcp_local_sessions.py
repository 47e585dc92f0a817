"""`sandhub mcp` keeps the selected sandbox per process (issue 24): two local servers on one
API key, each in a subprocess driven by a real fastmcp.Client, against a live platform (uvicorn
serving platform_site.asgi, real Docker sandboxes). One agent speaks the 2026-07-28 protocol
to its server, the other the handshake era: the selection is the process's either way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastmcp.exceptions import ToolError

from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import McpSession
from tests.client.helpers import local_server
from tests.live import run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


@pytest.fixture(scope="module")
def second_sandbox(world) -> Iterator[str]:
    principal = world.principal()
    info = services.create_sandbox(principal, memory_mb=256)
    yield info.id
    services.delete_sandbox(principal, info.id)


def test_two_local_servers_on_one_key_keep_their_own_selection(
    asgi_server, world, shared_sandbox, second_sandbox, tmp_path: Path
):
    key = world.keys["alice"]
    (tmp_path / "note.txt").write_text("from the laptop\n")

    async def conversation():
        async with (
            local_server(asgi_server, key, [tmp_path], tmp_path) as one,
            local_server(asgi_server, key, [tmp_path], tmp_path, mode="legacy") as two,
        ):
            await one.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            await two.call_tool("select_sandbox", {"sandbox_id": second_sandbox})
            await one.call_tool("run_command", {"command": "echo one > who-local.txt"})
            await two.call_tool("run_command", {"command": "echo two > who-local.txt"})
            reads = [
                (await agent.call_tool("read_file", {"path": "who-local.txt"})).data.content
                for agent in (one, two)
            ]
            uploads = [
                (
                    await agent.call_tool(
                        "upload_local_path", {"local_path": "note.txt", "remote_path": "note.txt"}
                    )
                ).structured_content["sandbox_id"]
                for agent in (one, two)
            ]
            active = [
                (await agent.call_tool("get_active_sandbox", {})).structured_content["sandbox"]
                for agent in (one, two)
            ]
            with pytest.raises(ToolError) as refused:
                await one.call_tool("delete_sandbox", {})
            return reads, uploads, active, str(refused.value)

    reads, uploads, active, refused = run(conversation())
    assert reads == ["one\n", "two\n"]
    assert uploads == [shared_sandbox, second_sandbox]
    assert [a["id"] for a in active] == [shared_sandbox, second_sandbox]
    assert "sandbox_id" in refused
    assert Sandbox.objects.get(public_id=shared_sandbox).status == "running"
    assert Sandbox.objects.get(public_id=second_sandbox).status == "running"
    # Each server ended its platform session as it exited.
    assert not McpSession.objects.exists()
