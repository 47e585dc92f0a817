"""create_sandbox with and without the warm pool, on the local Docker engine.

    .venv/bin/python bench/bench_pool.py [--creates 20] [--pool-size 2] [--no-mcp]

Times create_sandbox (call to running sandbox) through the service layer, and through MCP
over streamable HTTP (uvicorn on platform_site.asgi in a separate process, a real
fastmcp.Client, as bench_mcp.py does), each without a pool and with one. With the pool, the
pool is refilled before each creation, untimed, as the refill task would between requests:
what is timed is a claim. Each new sandbox is deleted right after, untimed.
Uses a throwaway SQLite database under var/ and its own SANDHUB_INSTANCE.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Callable

from _setup import ROOT, bench_principal, summary

MEMORY_MB = 256


def set_pool_size(size: int) -> None:
    from hosts.models import Image

    Image.objects.filter(is_default=True).update(warm_pool_size=size)
    refill()  # size 0 removes what a previous round left


def refill() -> None:
    from sandboxes import services
    from tenants.principal import Principal

    report = services.refill_warm_pools(Principal.system())
    if report.errors:
        raise SystemExit(f"refill failed: {report.errors}")


def claimed(sandbox_id: str) -> bool:
    from sandboxes.models import WarmContainer

    return WarmContainer.objects.filter(sandbox__public_id=sandbox_id).exists()


def bench_services(creates: int, pooled: bool) -> tuple[list[float], int]:
    from sandboxes import services

    principal = bench_principal()
    times, hits = [], 0
    for _ in range(creates):
        if pooled:
            refill()
        started = time.perf_counter()
        sandbox_id = services.create_sandbox(principal, memory_mb=MEMORY_MB).id
        times.append(time.perf_counter() - started)
        hits += claimed(sandbox_id)
        services.delete_sandbox(principal, sandbox_id)
    return times, hits


async def bench_mcp(url: str, key: str, creates: int, pooled: bool) -> tuple[list[float], int]:
    from asgiref.sync import sync_to_async
    from fastmcp import Client

    refill_async = sync_to_async(refill)
    claimed_async = sync_to_async(claimed)
    times, hits = [], 0
    async with Client(url, auth=key) as client:
        for _ in range(creates):
            if pooled:
                await refill_async()
            started = time.perf_counter()
            result = await client.call_tool(
                "create_sandbox", {"memory_mb": MEMORY_MB, "select": False}
            )
            times.append(time.perf_counter() - started)
            hits += await claimed_async(result.data.id)
            await client.call_tool("delete_sandbox", {"sandbox_id": result.data.id})
    return times, hits


def measure(
    label: str, run: Callable[[bool], tuple[list[float], int]], pool_size: int
) -> list[str]:
    lines = []
    for pooled in (False, True):
        set_pool_size(pool_size if pooled else 0)
        times, hits = run(pooled)
        name = f"{label} create_sandbox, " + (f"pool ({hits} claims)" if pooled else "no pool")
        lines.append(summary(name, times))
    set_pool_size(0)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--no-mcp", action="store_true", help="service layer only")
    args = parser.parse_args()

    # The web process started for MCP inherits these, so both use the same database and
    # label containers as this bench's own instance.
    os.environ["SANDHUB_INSTANCE"] = f"bench-{uuid.uuid4().hex[:8]}"
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # no line per request or queued task
    database = ROOT / "var" / f"bench-pool-{os.getpid()}.sqlite3"
    database.parent.mkdir(exist_ok=True)
    from bench_mcp import django_on_bench_db

    django_on_bench_db(database)
    try:
        lines = measure(
            "service", lambda pooled: bench_services(args.creates, pooled), args.pool_size
        )
        if not args.no_mcp:
            lines += mcp_lines(args.creates, args.pool_size)
    finally:
        set_pool_size(0)
        database.unlink(missing_ok=True)
    print("\n".join(lines))


def mcp_lines(creates: int, pool_size: int) -> list[str]:
    from bench_mcp import free_port, start_server

    from tenants import apikeys

    principal = bench_principal(channel="mcp")
    key = apikeys.create_key(principal.user, principal.team, name="bench-pool").plaintext
    port = free_port()
    server = start_server(port)
    url = f"http://127.0.0.1:{port}/mcp/"
    try:
        return measure(
            "MCP/HTTP",
            lambda pooled: asyncio.run(bench_mcp(url, key, creates, pooled)),
            pool_size,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
