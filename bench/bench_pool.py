"""create_sandbox and run_once with and without the warm pool, beside the engine's own
`containers.run` + remove, on the local Docker engine, in one run.

    .venv/bin/python bench/bench_pool.py [--creates 20] [--runs 20] [--pool-size 2] [--no-mcp]
    SANDHUB_AGENT=true .venv/bin/python bench/bench_pool.py     # commands through the agent

Prints, median and p95 of each:

- create_sandbox (call to running sandbox) through the service layer, without a pool and with
  one;
- the same through MCP over streamable HTTP (uvicorn on platform_site.asgi in a separate
  process, a real fastmcp.Client with an API key, as bench_mcp.py does);
- run_once `true` (create, run, delete: one MCP call) through MCP over HTTP, without a pool
  and with one;
- raw docker SDK `containers.run(image, ["true"], detach=True)`, wait, remove: the same work
  done by the engine alone;
- the ratio run_once p50 with the pool / raw run + remove p50 (issue 10: <= 0.5).

The pool: Image.warm_pool_size of the default image (the per-image form of
SANDHUB_WARM_POOL_SIZE, which applies to images whose own size is 0) is set to --pool-size for
the pooled rounds and to 0 after. In production a claim queues a refill task for the worker
(django-q2) and a schedule refills every minute; no worker runs here: the pool is refilled in
this process before each timed call, untimed, as the refill task would between requests. What
is timed with the pool is therefore a claim, never a cold start; the claims are counted.
Each sandbox made by create_sandbox is deleted right after, untimed (run_once deletes its own).
The line "commands: ..." says whether commands went through the sandbox agent
(SANDHUB_AGENT, read from the environment like the platform does).
Uses a throwaway SQLite database under var/, its own SANDHUB_INSTANCE (containers still
labelled with it are swept at the end) and creation rate limits lifted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable

from _setup import (
    ROOT,
    bench_instance,
    bench_principal,
    lift_creation_limits,
    summary,
    sweep_containers,
    timings,
)

MEMORY_MB = 256
Rounds = tuple[list[str], list[float]]  # the printed lines, the pooled round's timings


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


def ready_members() -> int:
    from sandboxes.models import WarmContainer, WarmContainerStatus

    return WarmContainer.objects.filter(status=WarmContainerStatus.READY).count()


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


async def bench_run_once(url: str, key: str, runs: int, pooled: bool) -> tuple[list[float], int]:
    """run_once `true` through MCP; a claim shows as one ready member fewer after the call
    (the member's row goes when run_once deletes its sandbox)."""
    from asgiref.sync import sync_to_async
    from fastmcp import Client

    refill_async = sync_to_async(refill)
    ready_async = sync_to_async(ready_members)
    times, hits = [], 0
    async with Client(url, auth=key) as client:
        await client.call_tool("run_once", {"command": "true"})  # warm-up, untimed
        for _ in range(runs):
            if pooled:
                await refill_async()
            before = await ready_async()
            started = time.perf_counter()
            result = await client.call_tool("run_once", {"command": "true"})
            times.append(time.perf_counter() - started)
            out = result.structured_content or {}
            if not out.get("deleted") or out.get("result", {}).get("exit_code") != 0:
                raise SystemExit(f"run_once did not run and delete: {out}")
            hits += await ready_async() < before
    return times, hits


def raw_run_remove(runs: int) -> list[float]:
    """The engine alone: start a container running `true`, wait for it, remove it."""
    import docker
    from django.conf import settings

    client = docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL, timeout=120)
    labels = {"org.sandhub.bench": "1", **instance_labels()}

    def once() -> None:
        container = client.containers.run(
            settings.SANDHUB_SANDBOX_IMAGE,
            ["true"],
            detach=True,
            network_mode="none",
            labels=labels,
        )
        container.wait()
        container.remove()

    try:
        once()  # warm-up: the connection, the image's layers in the page cache
        return timings(runs, once)
    finally:
        client.close()


def instance_labels() -> dict[str, str]:
    from sandboxes.housekeeping.config import instance_labels as labels

    return labels()


def measure(label: str, run: Callable[[bool], tuple[list[float], int]], pool_size: int) -> Rounds:
    lines, pooled_times = [], []
    for pooled in (False, True):
        set_pool_size(pool_size if pooled else 0)
        times, hits = run(pooled)
        name = f"{label}, " + (f"pool ({hits} claims)" if pooled else "no pool")
        lines.append(summary(name, times))
        if pooled:
            pooled_times = times
    set_pool_size(0)
    return lines, pooled_times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--runs", type=int, default=20, help="run_once calls per round")
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--no-mcp", action="store_true", help="service layer only")
    args = parser.parse_args()

    # The web process started for MCP inherits these, so both use the same database and
    # label containers as this bench's own instance.
    instance = bench_instance()
    lift_creation_limits()
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # no line per request or queued task
    database = ROOT / "var" / f"bench-pool-{os.getpid()}.sqlite3"
    database.parent.mkdir(exist_ok=True)
    from bench_mcp import django_on_bench_db

    django_on_bench_db(database)
    from django.conf import settings

    lines = [f"commands: {'sandbox agent' if settings.SANDHUB_AGENT else 'per-command exec'}"]
    try:
        lines += measure(
            "service create_sandbox",
            lambda pooled: bench_services(args.creates, pooled),
            args.pool_size,
        )[0]
        if not args.no_mcp:
            lines += mcp_lines(args.creates, args.runs, args.pool_size)
    finally:
        set_pool_size(0)
        sweep_containers(instance)
        for path in database.parent.glob(f"{database.name}*"):  # with -wal and -shm
            path.unlink(missing_ok=True)
    print("\n".join(lines))


def mcp_lines(creates: int, runs: int, pool_size: int) -> list[str]:
    from bench_mcp import free_port, start_server

    from tenants import apikeys

    principal = bench_principal(channel="mcp")
    key = apikeys.create_key(principal.user, principal.team, name="bench-pool").plaintext
    port = free_port()
    server = start_server(port)
    url = f"http://127.0.0.1:{port}/mcp/"
    try:
        lines = measure(
            "MCP/HTTP create_sandbox",
            lambda pooled: asyncio.run(bench_mcp(url, key, creates, pooled)),
            pool_size,
        )[0]
        once_lines, once_pooled = measure(
            "MCP/HTTP run_once `true`",
            lambda pooled: asyncio.run(bench_run_once(url, key, runs, pooled)),
            pool_size,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    raw = raw_run_remove(runs)
    ratio = statistics.median(once_pooled) / statistics.median(raw)
    return [
        *lines,
        *once_lines,
        summary("raw containers.run `true` + wait + remove", raw),
        f"run_once p50 with the pool / raw run + remove p50 = {ratio:.2f}   (target <= 0.5)",
    ]


if __name__ == "__main__":
    main()
