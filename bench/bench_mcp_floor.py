"""The floor of the MCP stack on this machine, beside the engine's exec of the same run.

    .venv/bin/python bench/bench_mcp_floor.py [--calls 300]

Issue 10 asks for run_command through MCP at <= 0.2 x raw `docker exec_run` p50. This prints
what the required stack costs before Sandhub does anything: a bare FastMCP server (the
pinned version, stateless streamable HTTP, uvicorn with uvloop and httptools as `make run`
starts it) whose only tool returns a constant, called
  1. by fastmcp.Client, the MCP client the benches use (what an agent's client costs too);
  2. by a plain HTTP POST of the same JSON-RPC tools/call (no client library: the server's
     share alone);
and the raw `docker exec_run(["echo", "hi"])` p50 on a container of the sandbox image. A
floor ratio above 0.2 means no work on the platform's own code can meet that target with
this stack on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

from _setup import FLOOR_APP, free_port, start_web, stop_web

CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "ping", "arguments": {}},
}


async def client_calls(url: str, calls: int) -> list[float]:
    from fastmcp import Client

    async with Client(url) as client:
        for _ in range(30):
            await client.call_tool("ping", {})
        seconds = []
        for _ in range(calls):
            started = time.perf_counter()
            await client.call_tool("ping", {})
            seconds.append(time.perf_counter() - started)
    return seconds


def plain_posts(url: str, calls: int, version: str) -> list[float]:
    import httpx2 as httpx

    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": version}
    call = CALL
    if version >= "2026":  # the modern protocol carries its envelope in every request
        meta = {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        call = {**CALL, "params": {**CALL["params"], "_meta": meta}}
        headers = {**headers, "Mcp-Method": "tools/call", "Mcp-Name": "ping"}
    seconds = []
    with httpx.Client() as http:
        for index in range(calls + 30):
            started = time.perf_counter()
            answer = http.post(url, json=call, headers=headers)
            if answer.status_code != 200 or "pong" not in answer.text:
                raise SystemExit(f"unexpected answer {answer.status_code}: {answer.text[:300]}")
            if index >= 30:
                seconds.append(time.perf_counter() - started)
    return seconds


def raw_exec(calls: int) -> list[float]:
    import docker

    image = os.environ.get("SANDHUB_SANDBOX_IMAGE", "sandhub/sandbox:latest")
    engine = docker.from_env()
    container = engine.containers.run(image, ["sleep", "600"], detach=True, network_mode="none")
    try:
        for _ in range(3):
            container.exec_run(["echo", "hi"])
        seconds = []
        for _ in range(calls):
            started = time.perf_counter()
            container.exec_run(["echo", "hi"])
            seconds.append(time.perf_counter() - started)
        return seconds
    finally:
        container.remove(force=True)
        engine.close()


def ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--raw", type=int, default=40)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp/"
    server = start_web(port, app=FLOOR_APP)
    try:
        client = asyncio.run(client_calls(url, args.calls))
        modern = plain_posts(url, args.calls, "2026-07-28")
        legacy = plain_posts(url, args.calls, "2025-06-18")
    finally:
        stop_web(server)
    raw = raw_exec(args.raw)
    base = ms(raw)
    print(f"{'raw docker exec_run `echo hi` p50':<44} {base:7.1f} ms   0.2x = {base * 0.2:.1f} ms")
    for label, seconds in (
        ("FastMCP no-op tool, fastmcp.Client", client),
        ("FastMCP no-op tool, plain POST (2026-07-28)", modern),
        ("FastMCP no-op tool, plain POST (2025-06-18)", legacy),
    ):
        print(f"{label:<44} {ms(seconds):7.1f} ms   ratio {ms(seconds) / base:.2f}")


if __name__ == "__main__":
    main()
