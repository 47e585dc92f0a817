"""The selected sandbox belongs to one MCP session, never to the API key (issue 24): real
fastmcp Clients over HTTP against the live server, the real Docker engine behind it.

Handshake-era clients (mode="legacy": initialize, then Mcp-Session-Id on every request) get a
session from the server; clients on the 2026-07-28 protocol (the default) have none and must
name their sandbox. Tools that delete or stop never take the selection.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx2 as httpx
import pytest
from django.utils import timezone
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError

from sandboxes import services
from sandboxes.models import Sandbox
from tenants import apikeys
from tenants.models import McpSession
from tests.live import in_thread, mcp, run

pytestmark = [
    pytest.mark.docker,
    # Log notifications still reach clients on the older protocol; the SDK warns about them.
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


@pytest.fixture(scope="module")
def second_sandbox(world) -> Iterator[str]:
    principal = world.principal()
    info = services.create_sandbox(principal, memory_mb=256)
    yield info.id
    services.delete_sandbox(principal, info.id)


def legacy(server: str, key: str) -> Client:
    return mcp(server, key, mode="legacy")


def in_session(server: str, key: str, session: str, **kwargs) -> Client:
    """A client presenting the given Mcp-Session-Id on every request (any protocol era)."""
    transport = StreamableHttpTransport(
        f"{server}/mcp/", auth=key, headers={"mcp-session-id": session}
    )
    return Client(transport, **kwargs)


def status(sandbox_id: str) -> str:
    return Sandbox.objects.get(public_id=sandbox_id).status


def text(result) -> str:
    return result.content[0].text


def test_two_agents_on_one_key_each_act_in_their_own_sandbox(
    asgi_server, world, shared_sandbox, second_sandbox
):
    """Agent A and agent B share alice's key. Each selects a sandbox; A's calls without
    sandbox_id act in A's sandbox only, and A's delete_sandbox without an id deletes
    nothing. (With the selection on the key, A wrote into and deleted B's sandbox.)"""
    key = world.keys["alice"]

    async def conversation():
        async with legacy(asgi_server, key) as agent_a, legacy(asgi_server, key) as agent_b:
            await agent_a.call_tool("select_sandbox", {"sandbox_id": second_sandbox})
            await agent_b.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            await agent_a.call_tool("write_file", {"path": "who.txt", "content": "A\n"})
            await agent_b.call_tool("run_command", {"command": "echo B > who.txt"})
            ran_a = await agent_a.call_tool("run_command", {"command": "cat who.txt"})
            read_a = await agent_a.call_tool("read_file", {"path": "who.txt"})
            read_b = await agent_b.call_tool("read_file", {"path": "who.txt"})
            in_a = await agent_b.call_tool(
                "read_file", {"sandbox_id": second_sandbox, "path": "who.txt"}
            )
            active_a = await agent_a.call_tool("get_active_sandbox", {})
            listed_b = await agent_b.call_tool("list_sandboxes", {})
            with pytest.raises(ToolError) as refused:
                await agent_a.call_tool("delete_sandbox", {})
            sessions = (agent_a.transport.get_session_id(), agent_b.transport.get_session_id())
            reads = [r.structured_content["content"] for r in (read_a, read_b, in_a)]
            return ran_a, reads, active_a, listed_b, str(refused.value), sessions

    ran_a, reads, active_a, listed_b, refused, sessions = run(conversation())
    assert ran_a.structured_content["stdout"] == "A\n"
    assert reads == ["A\n", "B\n", "A\n"]  # A's in A's sandbox, B's in B's
    assert active_a.structured_content["sandbox"]["id"] == second_sandbox
    assert listed_b.structured_content["selected"] == shared_sandbox
    assert "sandbox_id" in refused and "required" in refused.lower()
    assert status(shared_sandbox) == status(second_sandbox) == "running"
    assert sessions[0] and sessions[1] and sessions[0] != sessions[1]


def test_delete_stop_and_cancel_require_sandbox_id_in_their_schemas(asgi_server, world):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return {tool.name: tool for tool in await client.list_tools()}

    tools = run(conversation())
    for name in (
        "delete_sandbox",
        "stop_app",
        "cancel_background",
        "pause_sandbox",
        "stop_sandbox",
    ):
        schema = tools[name].input_schema
        assert "sandbox_id" in schema["required"], name
        assert schema["properties"]["sandbox_id"]["type"] == "string", name
        description = " ".join(tools[name].description.split())
        assert "never acts on the selected sandbox" in description, name
    for name in ("run_command", "read_file", "upload_files"):
        described = tools[name].input_schema["properties"]["sandbox_id"]["description"]
        assert "session" in described and "must pass it" in described, name


def test_a_client_without_a_session_is_told_to_pass_sandbox_id(asgi_server, world, shared_sandbox):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:  # 2026-07-28: no session
            ran = await client.call_tool(
                "run_command", {"command": "touch /workspace/nope"}, raise_on_error=False
            )
            selected = await client.call_tool(
                "select_sandbox", {"sandbox_id": shared_sandbox}, raise_on_error=False
            )
            active = await client.call_tool("get_active_sandbox", {})
            named = await client.call_tool(
                "run_command", {"sandbox_id": shared_sandbox, "command": "ls nope || echo no"}
            )
            return ran, selected, active, named

    ran, selected, active, named = run(conversation())
    for result in (ran, selected):
        assert result.is_error
        message = text(result)
        assert "pass sandbox_id" in message and "create_sandbox returned it" in message
        assert "has no session" in message and "2026-07-28" in message
    assert active.structured_content["sandbox"] is None
    assert named.structured_content["stdout"].endswith("no\n")


def test_a_session_id_presented_with_another_key_sees_no_selection(
    asgi_server, world, shared_sandbox
):
    async def conversation():
        async with legacy(asgi_server, world.keys["alice"]) as owner:
            await owner.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            session = owner.transport.get_session_id()
            assert session
            async with in_session(asgi_server, world.keys["dave"], session) as intruder:
                active = await intruder.call_tool("get_active_sandbox", {})
                ran = await intruder.call_tool(
                    "run_command", {"command": "echo here"}, raise_on_error=False
                )
            async with in_session(asgi_server, world.keys["alice"], session) as again:
                mine = await again.call_tool("get_active_sandbox", {})
            return active, ran, mine

    active, ran, mine = run(conversation())
    assert active.structured_content["sandbox"] is None
    assert ran.is_error and "no sandbox is selected in this MCP session" in text(ran)
    # The same key with the same id is the same session, whatever the protocol era.
    assert mine.structured_content["sandbox"]["id"] == shared_sandbox


def expire(digest: str) -> None:
    McpSession.objects.filter(digest=digest).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )


def test_an_expired_session_selects_nothing(asgi_server, world, shared_sandbox):
    async def conversation():
        async with legacy(asgi_server, world.keys["alice"]) as client:
            await client.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            digest = apikeys.session_digest(client.transport.get_session_id())
            await in_thread(expire, digest)
            active = await client.call_tool("get_active_sandbox", {})
            ran = await client.call_tool(
                "run_command", {"command": "echo here"}, raise_on_error=False
            )
            return active, ran

    active, ran = run(conversation())
    assert active.structured_content["sandbox"] is None
    assert ran.is_error and "no sandbox is selected in this MCP session" in text(ran)
    assert "forgotten after 24 hours without use" in text(ran)


def test_delete_ends_a_session_and_get_is_405(asgi_server, world, shared_sandbox):
    alice = {"Authorization": f"Bearer {world.keys['alice']}"}

    async def conversation():
        async with legacy(asgi_server, world.keys["alice"]) as client:
            await client.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            return client.transport.get_session_id()

    session = run(conversation())  # the client sends DELETE as it closes
    digest = apikeys.session_digest(session)
    assert not McpSession.objects.filter(digest=digest).exists()

    async def reselect():
        async with in_session(asgi_server, world.keys["alice"], session) as client:
            before = await client.call_tool("get_active_sandbox", {})
            await client.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            return before

    assert run(reselect()).structured_content["sandbox"] is None
    url, headers = f"{asgi_server}/mcp/", {"mcp-session-id": session}
    assert httpx.delete(url, headers=headers).status_code == 401  # no key: nothing ended
    bob = {"Authorization": f"Bearer {world.keys['bob']}"}
    assert httpx.delete(url, headers={**headers, **bob}).status_code == 204  # bob's own
    assert McpSession.objects.filter(digest=digest).exists()  # alice's is another session
    assert httpx.delete(url, headers={**headers, **alice}).status_code == 204
    assert not McpSession.objects.filter(digest=digest).exists()
    got = httpx.get(url, headers={**headers, **alice, "accept": "text/event-stream"})
    assert got.status_code == 405 and got.headers["allow"] == "POST, DELETE"


def test_session_ids_are_handed_to_handshake_posts_only(asgi_server, world):
    url = f"{asgi_server}/mcp/"
    headers = {
        "Authorization": f"Bearer {world.keys['alice']}",
        "Accept": "application/json, text/event-stream",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    first = httpx.post(url, json=initialize, headers=headers)
    second = httpx.post(url, json=initialize, headers=headers)
    assert first.status_code == second.status_code == 200
    assert len(first.headers["mcp-session-id"]) >= 40
    assert first.headers["mcp-session-id"] != second.headers["mcp-session-id"]
    # A request that brings its own gets none back; a malformed one is refused.
    kept = httpx.post(url, json=initialize, headers={**headers, "mcp-session-id": "mine-1234"})
    assert kept.status_code == 200 and "mcp-session-id" not in kept.headers
    bad = httpx.post(url, json=initialize, headers={**headers, "mcp-session-id": "x" * 300})
    assert bad.status_code == 400
    # Nothing is stored for a session that selected nothing.
    assert not McpSession.objects.exists() or all(
        s.selected_sandbox for s in McpSession.objects.all()
    )
