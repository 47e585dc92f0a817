"""Issue 28: a web process killed with a client's request in hand. With the MCP SDK's client
transport as it is, that client's session is dead afterwards: every later call fails at once
with "Connection closed" (client/sandhub/mcp_resilience.py says why). Through the resilient
transport, the call in flight fails and the next one is served, by the web process that
took the address over, in the same MCP session (the selected sandbox kept).

The web processes are scripts/web.sh on one loopback port, one after the other: the first is
frozen before the request reaches it (so it cannot answer it: no race), then killed -9.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from fastmcp import Client
from mcp.shared.exceptions import MCPError
from sandhub.mcp_resilience import resilient_transport

from tests.live import free_port, mcp, run
from tests.mcp.webfleet import WebProcess, request_waiting, start_web

pytestmark = pytest.mark.filterwarnings("ignore:The logging capability is deprecated")


@pytest.fixture
def web(world, tmp_path: Path) -> Iterator[list[WebProcess]]:
    """The web processes a test starts on its port (the first one started here)."""
    port = free_port()
    started = [start_web(port, tmp_path / "web.log")]
    yield started
    for web in started:
        web.stop()


async def kill_with_request_in_hand(
    webs: list[WebProcess], client: Client, log: Path
) -> BaseException | None:
    """Freeze the web process, send a call, kill -9 the process once the call has reached
    it, start another web process on the port; what the call raised (None: it was served)."""
    first = webs[0]
    first.freeze()
    call = asyncio.create_task(client.call_tool("get_active_sandbox", {}))
    deadline = time.monotonic() + 30
    while not request_waiting(first.port):
        assert time.monotonic() < deadline and not call.done(), "the call never reached it"
        await asyncio.sleep(0.01)
    first.kill()
    outcome = None
    try:
        await call
    except Exception as exc:
        outcome = exc
    webs.append(await asyncio.to_thread(start_web, first.port, log))
    return outcome


def test_the_resilient_transport_fails_one_call_and_keeps_the_session(
    web, world, shared_sandbox, tmp_path
):
    async def conversation():
        client = Client(
            resilient_transport(f"{web[0].url}/mcp/", world.keys["alice"]), mode="legacy"
        )
        async with client:
            await client.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            session = client.transport.get_session_id()
            failed = await kill_with_request_in_hand(web, client, tmp_path / "web.log")
            later = [await client.call_tool("get_active_sandbox", {}) for _ in range(2)]
            return failed, session, client.transport.get_session_id(), later

    failed, session_before, session_after, later = run(conversation())
    assert failed is not None and "connection to the MCP server was lost" in str(failed)
    assert session_after == session_before is not None
    assert [result.data.sandbox.id for result in later] == [shared_sandbox] * 2


def test_a_plain_fastmcp_client_session_is_dead_after_it(web, world, shared_sandbox, tmp_path):
    """What the issue measured, kept as a test of the library: if this starts failing, the
    SDK recovers by itself and the resilient transport may go."""

    async def conversation():
        later: list[str] = []
        try:
            async with mcp(web[0].url, world.keys["alice"], mode="legacy") as client:
                await client.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
                failed = await kill_with_request_in_hand(web, client, tmp_path / "web.log")
                for _ in range(2):  # a new web process serves the address by now
                    try:
                        await client.call_tool("get_active_sandbox", {})
                        later.append("served")
                    except Exception as exc:
                        later.append(dead_session(exc))
        except Exception as exc:  # the transport's error again, when the client closes
            return failed, later, dead_session(exc)
        return failed, later, None

    failed, later, on_close = run(conversation())
    assert failed is not None and dead_session(failed) == DEAD
    assert later == [DEAD, DEAD]
    assert on_close == DEAD


DEAD = "the session's transport is gone"


def dead_session(exc: BaseException) -> str:
    """The two ways a dead session answers: the SDK's "Connection closed", or fastmcp's
    Client raising the transport task's own error again (once its session task is done):
    a reset, a cut answer, or (when the killed process's port refused first) ConnectError."""
    if isinstance(exc, MCPError) and str(exc) == "Connection closed":
        return DEAD
    if isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError | httpx.ConnectError):
        return DEAD
    return repr(exc)
