"""bench_load's MCP clients: they run in the client processes too, so no Django here.

A probe is one call and its check: "echo" is run_command `echo hi` on the platform, "ping"
the do-nothing tool of the floor server (_floor_app.py), which has no sandboxes.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

ECHO = {"command": "echo hi"}
CALL_TIMEOUT = 60.0  # seconds: a call that takes longer is an error, not a hang
WARMUP = 3  # calls per client before anything is timed


async def echo(client: Any, sandbox_id: str) -> None:
    """One run_command `echo hi`; raises unless it answered exit 0 and "hi"."""
    result = await client.call_tool(
        "run_command", {**ECHO, "sandbox_id": sandbox_id}, timeout=CALL_TIMEOUT
    )
    out = result.structured_content or {}
    if out.get("exit_code") != 0 or out.get("stdout") != "hi\n":
        raise RuntimeError(f"unexpected result: {str(out)[:200]}")


async def ping(client: Any, sandbox_id: str) -> None:
    """The floor server's only tool; raises unless it answered "pong"."""
    result = await client.call_tool("ping", {}, timeout=CALL_TIMEOUT)
    if result.data != "pong":
        raise RuntimeError(f"unexpected result: {str(result.data)[:200]}")


PROBES = {"echo": echo, "ping": ping}


async def ignore(message: Any) -> None:
    """The clients' log handler: the output streamed as log notifications is not shown (the
    default handler prints each; that would cost the client side, not the platform)."""


@dataclass
class Outcome:
    """What one client process measured (picklable: it crosses the process boundary)."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    cpu: float = 0.0
    failed: str = ""  # the process could not take part at all


async def call_loop(
    probe: str, client: Any, sandbox_id: str, deadline: float, outcome: Outcome
) -> None:
    call = PROBES[probe]
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            await call(client, sandbox_id)
        except Exception as exc:
            outcome.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            await asyncio.sleep(0.05)  # an error in a tight loop would only measure itself
            continue
        outcome.latencies.append(time.perf_counter() - started)


async def run_clients(
    probe: str, url: str, key: str | None, ids: list[str], seconds: float, barrier: Any
) -> Outcome:
    from fastmcp import Client

    from platform_site.gcpolicy import settle_long_lived_process  # no Django in it

    outcome = Outcome()
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(Client(url, auth=key, log_handler=ignore)) for _ in ids
        ]
        for client, sandbox_id in zip(clients, ids, strict=True):
            for _ in range(WARMUP):
                await PROBES[probe](client, sandbox_id)
        # The web workers' collector settings: ten clients share this process, and one of
        # its full collections (up to 250 ms) would be counted as the platform's latency.
        settle_long_lived_process()
        await asyncio.to_thread(barrier.wait, 300)
        cpu, started = time.process_time(), time.monotonic()
        deadline = started + seconds
        await asyncio.gather(
            *(call_loop(probe, c, s, deadline, outcome) for c, s in zip(clients, ids, strict=True))
        )
        outcome.elapsed = time.monotonic() - started
        outcome.cpu = time.process_time() - cpu
    return outcome


def client_process(
    probe: str, url: str, key: str | None, ids: list[str], seconds: float, barrier, queue
) -> None:
    """Entry point of one client process: its clients' outcome goes to `queue`."""
    try:
        outcome = asyncio.run(run_clients(probe, url, key, ids, seconds, barrier))
    except BaseException as exc:
        barrier.abort()  # the others and the parent stop waiting for this one
        outcome = Outcome(failed=f"{type(exc).__name__}: {exc}"[:500])
    queue.put(outcome)
