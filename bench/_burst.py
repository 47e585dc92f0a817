"""bench_lifecycle's MCP clients: they also run in client processes of their own, so no Django.

A "first" is what an agent platform's user waits for before anything useful happens:
create_sandbox, then the first command in it (`echo hi`), both over MCP, timed together.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

CALL_TIMEOUT = 120.0  # seconds: a call that takes longer is an error, not a hang


async def ignore(message: Any) -> None:
    """Log notifications (a command's live output) are not shown: printing is the client's."""


async def create_and_first_command(client: Any, **create: Any) -> tuple[float, float, str]:
    """(seconds from create_sandbox's call to the first command's answer, of them the
    create_sandbox call's, the sandbox id)."""
    started = time.perf_counter()
    made = await client.call_tool(
        "create_sandbox", {"select": False, **create}, timeout=CALL_TIMEOUT
    )
    created = time.perf_counter() - started
    sandbox_id = made.data.id
    ran = await client.call_tool(
        "run_command", {"command": "echo hi", "sandbox_id": sandbox_id}, timeout=CALL_TIMEOUT
    )
    out = ran.structured_content or {}
    if out.get("exit_code") != 0 or out.get("stdout") != "hi\n":
        raise RuntimeError(f"unexpected result in {sandbox_id}: {str(out)[:200]}")
    return time.perf_counter() - started, created, sandbox_id


async def two_pings(client: Any) -> tuple[float, float, str]:
    """The floor's pair: two calls of FastMCP's do-nothing tool (_floor_app.py), timed as
    create_and_first_command times its two."""
    started = time.perf_counter()
    await client.call_tool("ping", {}, timeout=CALL_TIMEOUT)
    first = time.perf_counter() - started
    await client.call_tool("ping", {}, timeout=CALL_TIMEOUT)
    return time.perf_counter() - started, first, ""


PAIRS = {"first": create_and_first_command, "floor": two_pings}


@dataclass
class Outcome:
    """What one client process measured (picklable: it crosses the process boundary)."""

    latencies: list[float] = field(default_factory=list)
    creates: list[float] = field(default_factory=list)  # the create_sandbox calls alone
    ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cpu: float = 0.0  # this client process's CPU seconds in the burst
    failed: str = ""  # the process could not take part at all


async def _burst(url: str, key: str | None, clients: int, barrier: Any, pair: str) -> Outcome:
    from fastmcp import Client

    outcome = Outcome()
    async with AsyncExitStack() as stack:
        connected = [
            await stack.enter_async_context(Client(url, auth=key, log_handler=ignore))
            for _ in range(clients)
        ]
        await asyncio.to_thread(barrier.wait, 300)
        cpu = time.process_time()

        async def one(client: Any) -> None:
            try:
                seconds, created, sandbox_id = await PAIRS[pair](client)
            except Exception as exc:
                outcome.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                return
            outcome.latencies.append(seconds)
            outcome.creates.append(created)
            if sandbox_id:
                outcome.ids.append(sandbox_id)

        await asyncio.gather(*(one(client) for client in connected))
        outcome.cpu = time.process_time() - cpu
    return outcome


def burst_process(
    url: str, key: str | None, clients: int, barrier: Any, queue: Any, pair: str = "first"
) -> None:
    """Entry point of one client process: `clients` pairs of calls at once (PAIRS: creates +
    first commands, or the floor's), after the barrier; the outcome goes to `queue`."""
    try:
        outcome = asyncio.run(_burst(url, key, clients, barrier, pair))
    except BaseException as exc:
        barrier.abort()
        outcome = Outcome(failed=f"{type(exc).__name__}: {exc}"[:500])
    queue.put(outcome)
