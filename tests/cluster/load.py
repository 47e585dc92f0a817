"""The MCP clients of the layout's load: fastmcp Clients over HTTP, spread over the web
processes, each in an MCP session of its own (its own Mcp-Session-Id, kept across
reconnects), working in its team's sandboxes. No Django here: the clients only speak HTTP.

A client loops over a mix of calls (short echo, a command of a few seconds, a file written
and read back, background jobs started and checked) until the load's end; every call is a
`CallRecord`. A failed call is counted and the client reconnects (`reconnect`, the one place
the lead may swap for a reconnecting client helper).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from sandhub.mcp_resilience import resilient_http_client

CALL_TIMEOUT = 60.0  # a call that takes longer is an error, not a hang
RECONNECT_PAUSE = 0.25  # between two tries to reach a web process that does not answer
SLOW_SECONDS = 2  # "a command of a few seconds"
BACKGROUND_SECONDS = 3
# The mix, one step per call: most are short echoes (the latency figure), then the rest.
HOME_EVERY = 10  # steps between tries to go back to the home web process
MIX = ("echo", "echo", "echo", "slow", "files", "echo", "bg_start", "echo", "bg_check", "echo")


@dataclass
class CallRecord:
    client: int
    web: int  # the web process the call went to
    kind: str
    start: float  # monotonic
    seconds: float
    ok: bool
    error: str = ""
    tag: str = ""  # the command's tag (tag()), for a call that runs one

    @property
    def failed_at(self) -> float:
        return self.start + self.seconds


@dataclass
class Job:
    task_id: int
    tag: str
    sandbox_id: str
    status: str = "running"
    output: str = ""
    error: str = ""


@dataclass
class ClientState:
    index: int
    key: str
    home: int  # the web process it starts on
    sandbox_id: str = ""
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    web: int = 0
    client: Any = None
    records: list[CallRecord] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    tags: dict[str, int] = field(default_factory=dict)  # command tag -> web it went to
    reconnects: int = 0


def open_client(url: str, key: str, session: str) -> Client:
    # The resilient HTTP client (sandhub.mcp_resilience): a web process dying under a call
    # fails that call with a clear error instead of ending the whole MCP session.
    transport = StreamableHttpTransport(
        f"{url}/mcp/",
        auth=key,
        headers={"mcp-session-id": session},
        httpx_client_factory=resilient_http_client,
    )
    return Client(transport)


async def connect(state: ClientState, urls: list[str], until: float) -> None:
    """Open a client on the home web process, else the next that answers, until `until`."""
    order = [state.home, *[i for i in range(len(urls)) if i != state.home]]
    while True:
        for web in order:
            client = open_client(urls[web], state.key, state.session)
            try:
                await asyncio.wait_for(client.__aenter__(), 10)
            except Exception:
                with contextlib.suppress(Exception):
                    await client.__aexit__(None, None, None)
                continue
            state.client, state.web = client, web
            return
        if time.monotonic() > until:
            raise RuntimeError(f"client {state.index}: no web process answers")
        await asyncio.sleep(RECONNECT_PAUSE)


async def reconnect(state: ClientState, urls: list[str], until: float) -> None:
    """After a failed call: drop the client and open a new one in the same MCP session (the
    session's selection is in the database, so any web process carries it on)."""
    state.reconnects += 1
    old, state.client = state.client, None
    if old is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(old.__aexit__(None, None, None), 5)
    await connect(state, urls, until)


async def return_home(state: ClientState, urls: list[str]) -> None:
    """Back to the home web process once it answers again (as a load balancer would send
    new connections there): not a failure, just a new client in the same session."""
    client = open_client(urls[state.home], state.key, state.session)
    try:
        await asyncio.wait_for(client.__aenter__(), 5)
    except Exception:
        with contextlib.suppress(Exception):
            await client.__aexit__(None, None, None)
        return
    old, state.client, state.web = state.client, client, state.home
    with contextlib.suppress(Exception):
        await asyncio.wait_for(old.__aexit__(None, None, None), 5)


async def call(state: ClientState, urls: list[str], kind: str, tool: str,
               args: dict[str, Any], until: float, mark: str = "") -> Any:  # fmt: skip
    """One tool call, recorded; None when it failed (then the client has reconnected)."""
    started = time.monotonic()
    web = state.web
    try:
        result = await state.client.call_tool(tool, args, timeout=CALL_TIMEOUT)
    except Exception as exc:
        state.records.append(
            CallRecord(
                state.index,
                web,
                kind,
                started,
                time.monotonic() - started,
                False,
                f"{type(exc).__name__}: {str(exc)[:200]}",
            )  # fmt: skip
        )
        await reconnect(state, urls, until + 30)
        return None
    state.records.append(
        CallRecord(state.index, web, kind, started, time.monotonic() - started, True, "", mark)
    )
    return result.structured_content or {}


def tag(state: ClientState, note: str) -> str:
    """A tag naming the client, its web process and the call: the history row of the
    command carries it, so the checks know which web process ran it."""
    text = f"c{state.index}w{state.web}n{len(state.records)}{note}"
    state.tags[text] = state.web
    return text


async def step(state: ClientState, urls: list[str], kind: str, until: float) -> None:
    if kind == "echo":
        mark = tag(state, "e")
        await call(state, urls, kind, "run_command", {"command": f"echo {mark}"}, until, mark)
    elif kind == "slow":
        mark = tag(state, "s")
        command = f"sleep {SLOW_SECONDS}; echo {mark}"
        await call(state, urls, kind, "run_command", {"command": command}, until, mark)
    elif kind == "files":
        content = f"{state.index}-{len(state.records)}\n"
        path = f"client{state.index}.txt"
        written = await call(state, urls, "write", "write_file",
                             {"path": path, "content": content}, until)  # fmt: skip
        if written is not None:
            await call(state, urls, "read", "read_file", {"path": path}, until)
    elif kind == "bg_start":
        if sum(job.status == "running" for job in state.jobs) < 2:
            await start_job(state, urls, until)
    elif kind == "bg_check":
        await check_jobs(state, urls, until)


async def start_job(state: ClientState, urls: list[str], until: float) -> None:
    mark = tag(state, "b")
    command = f"sleep {BACKGROUND_SECONDS}; echo {mark}"
    args = {"command": command}
    out = await call(state, urls, "bg_start", "start_background", args, until, mark)
    if out:
        state.jobs.append(Job(out["task_id"], mark, state.sandbox_id))


async def check_jobs(state: ClientState, urls: list[str], until: float) -> None:
    for job in [j for j in state.jobs if j.status == "running"]:
        out = await call(state, urls, "bg_check", "check_background",
                         {"task_id": job.task_id}, until)  # fmt: skip
        if out and not out.get("running"):
            job.status = out.get("status", "?")
            job.output = out.get("output", "")
            job.error = out.get("error_message", "")


async def select(state: ClientState, urls: list[str], until: float) -> None:
    """Select the client's sandbox in its session; calls name no sandbox after this."""
    while await call(state, urls, "select", "select_sandbox",
                     {"sandbox_id": state.sandbox_id}, until) is None:  # fmt: skip
        if time.monotonic() > until:
            raise RuntimeError(f"client {state.index} could not select its sandbox")


async def client_loop(state: ClientState, urls: list[str], until: float) -> None:
    await select(state, urls, until)
    turn = state.index  # clients start at different points of the mix
    while time.monotonic() < until:
        await step(state, urls, MIX[turn % len(MIX)], until)
        turn += 1
        if state.web != state.home and turn % HOME_EVERY == 0:
            await return_home(state, urls)


async def finish_jobs(state: ClientState, urls: list[str], deadline: float) -> None:
    """Check the client's jobs until each has ended (or the deadline)."""
    while any(job.status == "running" for job in state.jobs) and time.monotonic() < deadline:
        await check_jobs(state, urls, deadline)
        if any(job.status == "running" for job in state.jobs):
            await asyncio.sleep(0.5)


async def close(state: ClientState) -> None:
    if state.client is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(state.client.__aexit__(None, None, None), 5)
        state.client = None
