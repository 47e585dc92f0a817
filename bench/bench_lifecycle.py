"""Create at the speed of the pool, beside the engine's own figures, in one run (issue 25).

    .venv/bin/python bench/bench_lifecycle.py [--rounds 15] [--pool 5] [--burst 50]
        [--client-processes 2] [--raw 15] [--no-burst]

On a throwaway SQLite database (one team with room for the burst, the local Docker host, the
default image) it starts the `make run` layout: scripts/web.sh (uvicorn, one worker per core
unless SANDHUB_WEB_WORKERS says otherwise) and `manage.py qcluster`, and talks to it as an
agent platform does: fastmcp Clients over streamable HTTP with an API key. It prints, median
and p99 of each, in this order:

1. the engine alone: a raw `docker run` (create + start) of the sandbox image plus its first
   `exec echo hi`, and an `exec echo hi` in a running container;
2. cold: create_sandbox + the first run_command `echo hi`, without a pool, --rounds times in
   a row (each sandbox deleted after, untimed);
3. from the pool: the same with a pool of --pool, each round after the worker has refilled it
   (as between two users' requests), and the ratio to cold (target <= 0.3);
4. burst: a pool of --burst (filled by this process, untimed; then the web processes are given
   time to start what they keep for it), then --burst clients at once, spread over
   --client-processes processes, each create + first command (target p99 <= 1.5 s, 0 errors),
   of it the create_sandbox calls, where the CPU went in the burst (the machine's, the web
   processes', the worker's, the engine's, the containers', the clients'), how long the
   worker took to refill the pool afterwards, and the floor: the same clients and web
   workers making two calls each of FastMCP's do-nothing tool (_floor_app.py), i.e. what
   the MCP stack alone costs at that concurrency on this machine;
5. run_once `echo hi` without and with the pool (one MCP call: create, command, delete);
6. the lines of bench/lifecycle_pause.py and bench/lifecycle_fork.py (`measure()`), where
   those files exist.

Every sandbox made is deleted at the end, the pool emptied, the processes stopped, also after
an error or Ctrl-C; containers still labelled with this run's SANDHUB_INSTANCE are swept. The
machine is shared: compare the ratios of one run, never figures between runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import multiprocessing
import os
import statistics
import threading
import time
from pathlib import Path

import _platform
from _burst import Outcome, burst_process, create_and_first_command, ignore
from _setup import (
    FLOOR_APP,
    bench_instance,
    bench_principal,
    delete_sandboxes,
    django_on_scratch_db,
    free_port,
    lift_creation_limits,
    make_room,
    ms,
    percentile,
    remove_scratch,
    start_web,
    stop_web,
    sweep_containers,
)

REFILL_WAIT = 120.0  # seconds the worker gets to refill the pool before the bench does it


def line(label: str, seconds: list[float]) -> str:
    if not seconds:
        return f"{label:<50} no samples"
    return (
        f"{label:<50} n={len(seconds):<4} p50 {ms(statistics.median(seconds)):>9}"
        f"   p99 {ms(percentile(seconds, 99)):>9}   max {ms(max(seconds)):>9}"
    )


async def sequential(url: str, key: str, rounds: int, pool: int, made: list[str]) -> list[float]:
    """create + first command `rounds` times in a row; with a pool, each after the worker
    refilled it (and the web processes had a moment to take up the new member)."""
    from asgiref.sync import sync_to_async
    from fastmcp import Client

    seconds = []
    async with Client(url, auth=key, log_handler=ignore) as client:
        _, _, warm = await create_and_first_command(client)  # warm-up, untimed
        await client.call_tool("delete_sandbox", {"sandbox_id": warm})
        for _ in range(rounds):
            if pool:
                await sync_to_async(_refilled)(pool)
            took, _, sandbox_id = await create_and_first_command(client)
            seconds.append(took)
            made.append(sandbox_id)  # deleted at the end if its deletion here fails
            await client.call_tool("delete_sandbox", {"sandbox_id": sandbox_id})
            made.remove(sandbox_id)
    return seconds


def _refilled(size: int) -> None:
    if _platform.wait_for_pool(size, REFILL_WAIT) is None:
        print(f"  (the worker had not refilled the pool within {REFILL_WAIT:.0f} s)", flush=True)
        _platform.fill_pool_here()
    _platform.wait_for_agents(_platform_workers(), 5.0)


def _platform_workers() -> int:
    return int(os.environ.get("SANDHUB_WEB_WORKERS") or os.cpu_count() or 1)


async def run_once(url: str, key: str, rounds: int, pool: int) -> list[float]:
    from asgiref.sync import sync_to_async
    from fastmcp import Client

    seconds = []
    async with Client(url, auth=key, log_handler=ignore) as client:
        await client.call_tool("run_once", {"command": "true"})  # warm-up
        for _ in range(rounds):
            if pool:
                await sync_to_async(_refilled)(pool)
            started = time.perf_counter()
            result = await client.call_tool("run_once", {"command": "echo hi"})
            seconds.append(time.perf_counter() - started)
            out = result.structured_content or {}
            if out.get("result", {}).get("stdout") != "hi\n":
                raise SystemExit(f"run_once did not run: {str(out)[:300]}")
    return seconds


def burst(
    url: str, key: str | None, clients: int, processes: int, pair: str = "first"
) -> list[Outcome]:
    """`clients` pairs of calls at once (creates + first commands, or the floor's two pings)
    from `processes` client processes."""
    context = multiprocessing.get_context("spawn")  # no Django, threads or sockets inherited
    barrier = context.Barrier(processes + 1)
    queue = context.Queue()
    shares = [len(range(i, clients, processes)) for i in range(processes)]
    children = [
        context.Process(target=burst_process, args=(url, key, share, barrier, queue, pair))
        for share in shares
    ]
    try:
        for child in children:
            child.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=300)
        return [queue.get(timeout=600) for _ in children]
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()


def burst_lines(
    args: argparse.Namespace, platform: _platform.Platform, key: str, made: list[str]
) -> list[str]:
    _platform.set_pool_size(args.burst)
    _platform.fill_pool_here()
    settled = _platform.wait_for_agents(_platform_workers(), 120.0)
    print(f"burst: pool of {args.burst} ready; agents settled: {settled}", flush=True)
    before, started = _platform.cpu_reading(platform), time.monotonic()
    outcomes = burst(platform.url, key, args.burst, args.client_processes)
    wall = time.monotonic() - started
    cpu = _platform.cpu_line(
        before, _platform.cpu_reading(platform), sum(o.cpu for o in outcomes), wall
    )
    failed = [o.failed for o in outcomes if o.failed]
    if failed:
        raise SystemExit(f"a client process failed: {failed[0]}")
    ended = time.monotonic()
    latencies = [s for o in outcomes for s in o.latencies]
    creates = [s for o in outcomes for s in o.creates]
    errors = [e for o in outcomes for e in o.errors]
    made.extend(i for o in outcomes for i in o.ids)
    refill = _platform.wait_for_pool(args.burst, REFILL_WAIT)
    refilled = "not within " + f"{REFILL_WAIT:.0f} s" if refill is None else f"{refill:.1f} s"
    p99 = percentile(latencies, 99) if latencies else float("inf")
    return [
        line(f"burst: {args.burst} at once, create + first command", latencies),
        line("  of which create_sandbox", creates),
        f"  errors {len(errors)}" + "".join(f"\n  error: {e}" for e in errors[:5]),
        cpu,
        f"  target p99 <= 1.5 s and 0 errors: {'yes' if p99 <= 1.5 and not errors else 'no'}",
        f"  the worker refilled the pool of {args.burst} in {refilled} after the burst "
        f"(measured {time.monotonic() - ended:.1f} s)",
    ]


def floor_line(args: argparse.Namespace, scratch: Path, workers: int) -> str:
    """The same burst on FastMCP's do-nothing tool (_floor_app.py: no auth, no database, no
    sandbox), same web workers and client processes: what the MCP stack alone costs."""
    port = free_port()
    server = start_web(port, workers, log=scratch / "floor.log", app=FLOOR_APP)
    try:
        url = f"http://127.0.0.1:{port}/mcp/"
        outcomes = burst(url, None, args.burst, args.client_processes, pair="floor")
    finally:
        stop_web(server)
    latencies = [s for o in outcomes for s in o.latencies]
    errors = sum(len(o.errors) for o in outcomes)
    return line(f"floor: {args.burst} at once, two do-nothing MCP calls", latencies) + (
        f"   errors {errors}" if errors else ""
    )


def hook_lines(args: argparse.Namespace) -> list[str]:
    """The other lifecycle benches' lines, where their modules exist (issue 25)."""
    lines = []
    hooks = {
        "lifecycle_pause": {"rounds": args.pause_rounds},
        "lifecycle_fork": {"size_mb": args.fork_mb, "rounds": args.fork_rounds},
    }
    for name, arguments in hooks.items():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        measured = [f"{name}:", *module.measure(**arguments)]
        print("\n".join(measured), flush=True)
        lines += measured
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--pool", type=int, default=5)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--raw", type=int, default=15)
    parser.add_argument("--no-burst", action="store_true")
    parser.add_argument("--no-hooks", action="store_true", help="skip lifecycle_pause/_fork")
    parser.add_argument("--pause-rounds", type=int, default=15)
    parser.add_argument("--fork-mb", type=int, default=1024)
    parser.add_argument("--fork-rounds", type=int, default=4)
    args = parser.parse_args()

    os.environ.setdefault("LOG_LEVEL", "WARNING")
    instance = bench_instance()
    lift_creation_limits()
    scratch = django_on_scratch_db()
    principal, made = bench_principal(channel="mcp"), []
    make_room(principal, args.burst + args.pool)
    platform = _platform.Platform(scratch)
    try:
        from tenants import apikeys

        key = apikeys.create_key(principal.user, principal.team, name="bench").plaintext
        raw_cold, raw_exec = _platform.raw_engine(args.raw)
        platform.start()
        url = platform.url
        print(f"platform up: {platform.web_workers} web workers + qcluster", flush=True)
        cold = asyncio.run(sequential(url, key, args.rounds, 0, made))
        _platform.set_pool_size(args.pool)
        _platform.fill_pool_here()
        pooled = asyncio.run(sequential(url, key, args.rounds, args.pool, made))
        ratio = statistics.median(pooled) / statistics.median(cold)
        to_exec = statistics.median(pooled) / statistics.median(raw_exec)
        lines = [
            line("raw engine: run (create + start) + first exec", raw_cold),
            line("raw engine: exec in a running container", raw_exec),
            line("cold: create_sandbox + first command", cold),
            line(f"pool of {args.pool}: create_sandbox + first command", pooled),
            f"  pool p50 / cold p50 = {ratio:.2f}   (target <= 0.3); "
            f"pool p50 / raw exec p50 = {to_exec:.2f}",
        ]
        print("\n".join(lines), flush=True)
        if not args.no_burst:
            lines += burst_lines(args, platform, key, made)
            lines.append(floor_line(args, scratch, platform.web_workers))
            print("\n".join(lines[-7:]), flush=True)
        _platform.set_pool_size(0)
        _platform.fill_pool_here()
        once_cold = asyncio.run(run_once(url, key, args.rounds, 0))
        _platform.set_pool_size(args.pool)
        _platform.fill_pool_here()
        once_pooled = asyncio.run(run_once(url, key, args.rounds, args.pool))
        lines += [
            line("run_once `echo hi`, no pool", once_cold),
            line(f"run_once `echo hi`, pool of {args.pool}", once_pooled),
        ]
        print("\n".join(lines[-2:]), flush=True)
        if not args.no_hooks:
            # The burst's sandboxes are done with: the hooks measure on a quiet machine.
            failed = delete_sandboxes(principal, made)
            made.clear()
            if failed:
                raise SystemExit(f"deleting the burst's sandboxes failed: {failed[0]}")
            lines += hook_lines(args)
        print("\nall figures:\n" + "\n".join(lines))
    finally:
        platform.stop()
        failures = delete_sandboxes(principal, made)
        with contextlib.suppress(Exception):
            _platform.set_pool_size(0)
            _platform.fill_pool_here()
        swept = sweep_containers(instance)
        if failures or swept:
            print(f"cleanup: {len(failures)} deletions failed, {swept} containers swept")
        remove_scratch(scratch)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("interrupted; sandboxes and processes cleaned up") from None
