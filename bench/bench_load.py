"""Many MCP clients at once over streamable HTTP, beside the engine's own exec, in one run.

    .venv/bin/python bench/bench_load.py [--clients 20] [--seconds 30] [--workers CORES]
        [--client-processes N] [--single 200] [--raw 30] [--raw-seconds 10]

Sets up a throwaway SQLite database (migrated; one team with a large quota, one user, an API
key from tenants.apikeys, the local Docker host and the default image), then starts the web
process as `make run` does: uvicorn platform_site.asgi with --workers W on a free loopback
port, with SANDHUB_AGENT=true. It creates one sandbox per client (service layer, untimed) and
measures, in this order:

1. single client: one fastmcp.Client (bearer key) calls run_command `echo hi` ~200 times in
   a row on one sandbox, after a warm-up: p50, p99 (issue 10: p50 <= 0.2 x raw exec_run p50);
2. load: N clients, each on its own sandbox, call run_command `echo hi` in a loop for D
   seconds. The clients run as asyncio tasks spread over several OS processes (multiprocessing,
   spawn), so one client process's GIL does not cap the figure; they start together (a
   barrier, after each client's warm-up and the web workers' collector settings,
   platform_site/gcpolicy.py, so a client process's own pauses are not counted as the
   platform's latency) and stop calling at D seconds. A result that is not
   exit 0 with stdout "hi" counts as an error. Prints total commands, commands/s, p50, p99,
   max, errors (count and the first few), and the CPU time the web workers and the clients
   used in the window, so a saturated client side shows (issue 10: >= 150 commands/s,
   p99 <= 300 ms, 0 errors);
3. raw: docker SDK `exec_run(["echo", "hi"])` as the sandbox user on one sandbox's container,
   sequential median over --raw runs, then the engine's exec throughput with 10 threads
   (one sandbox container each) for --raw-seconds;
4. ratios from this run: single-client p50 / raw p50, load p50 / raw p50, and load
   commands/s / raw 10-thread execs/s (issue 10: >= 7x).

The web process's own output (fastmcp logs a line per notification it sends) goes to a file
in the scratch directory, not the terminal. Every sandbox, the web process and the client
processes are removed at the end, also after
an error or Ctrl-C; containers still labelled with this run's SANDHUB_INSTANCE are swept.
The machine is shared: compare the ratios of one run, not figures between days.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from _setup import (
    bench_instance,
    bench_principal,
    child_pids,
    create_sandboxes,
    delete_sandboxes,
    django_on_scratch_db,
    free_port,
    lift_creation_limits,
    make_room,
    ms,
    percentile,
    proc_status,
    remove_scratch,
    start_web,
    stop_web,
    summary,
    sweep_containers,
    thread_throughput,
    timings,
)

ECHO = {"command": "echo hi"}
CALL_TIMEOUT = 60.0  # seconds: a call that takes longer is an error, not a hang
WARMUP = 3  # calls per client before anything is timed
SHOWN_ERRORS = 5


# --- the clients (these run in the client processes too: no Django here) ---------------------


async def echo(client: Any, sandbox_id: str) -> None:
    """One run_command `echo hi`; raises unless it answered exit 0 and "hi"."""
    result = await client.call_tool(
        "run_command", {**ECHO, "sandbox_id": sandbox_id}, timeout=CALL_TIMEOUT
    )
    out = result.structured_content or {}
    if out.get("exit_code") != 0 or out.get("stdout") != "hi\n":
        raise RuntimeError(f"unexpected result: {str(out)[:200]}")


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


async def call_loop(client: Any, sandbox_id: str, deadline: float, outcome: Outcome) -> None:
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            await echo(client, sandbox_id)
        except Exception as exc:
            outcome.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            await asyncio.sleep(0.05)  # an error in a tight loop would only measure itself
            continue
        outcome.latencies.append(time.perf_counter() - started)


async def run_clients(url: str, key: str, ids: list[str], seconds: float, barrier: Any) -> Outcome:
    from fastmcp import Client

    from platform_site.gcpolicy import settle_long_lived_process  # no Django in it

    outcome = Outcome()
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(Client(url, auth=key, log_handler=ignore)) for _ in ids
        ]
        for client, sandbox_id in zip(clients, ids, strict=True):
            for _ in range(WARMUP):
                await echo(client, sandbox_id)
        # The web workers' collector settings: ten clients share this process, and one of
        # its full collections (up to 250 ms) would be counted as the platform's latency.
        settle_long_lived_process()
        await asyncio.to_thread(barrier.wait, 300)
        cpu, started = time.process_time(), time.monotonic()
        deadline = started + seconds
        await asyncio.gather(
            *(call_loop(c, s, deadline, outcome) for c, s in zip(clients, ids, strict=True))
        )
        outcome.elapsed = time.monotonic() - started
        outcome.cpu = time.process_time() - cpu
    return outcome


def client_process(url: str, key: str, ids: list[str], seconds: float, barrier, queue) -> None:
    """Entry point of one client process: its clients' outcome goes to `queue`."""
    try:
        outcome = asyncio.run(run_clients(url, key, ids, seconds, barrier))
    except BaseException as exc:
        barrier.abort()  # the others and the parent stop waiting for this one
        outcome = Outcome(failed=f"{type(exc).__name__}: {exc}"[:500])
    queue.put(outcome)


# --- the phases -------------------------------------------------------------------------------


async def single_client(url: str, key: str, sandbox_id: str, calls: int) -> list[float]:
    from fastmcp import Client

    async with Client(url, auth=key, log_handler=ignore) as client:
        for _ in range(20):
            await echo(client, sandbox_id)
        seconds = []
        for _ in range(calls):
            started = time.perf_counter()
            await echo(client, sandbox_id)
            seconds.append(time.perf_counter() - started)
    return seconds


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes so far (/proc/<pid>/stat, clock ticks)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


@dataclass
class Load:
    outcomes: list[Outcome]
    processes: int
    web_cpu: float
    web_rss: int  # bytes, all web workers together, after the load

    @property
    def latencies(self) -> list[float]:
        return [s for outcome in self.outcomes for s in outcome.latencies]

    @property
    def errors(self) -> list[str]:
        return [e for outcome in self.outcomes for e in outcome.errors]

    @property
    def elapsed(self) -> float:
        return max(outcome.elapsed for outcome in self.outcomes)


def load(url: str, key: str, ids: list[str], seconds: float, processes: int, web_pid: int) -> Load:
    context = multiprocessing.get_context("spawn")  # no Django, threads or sockets inherited
    barrier = context.Barrier(processes + 1)
    queue = context.Queue()
    shares = [ids[i::processes] for i in range(processes)]
    children = [
        context.Process(target=client_process, args=(url, key, share, seconds, barrier, queue))
        for share in shares
    ]
    workers = child_pids(web_pid)
    try:
        for child in children:
            child.start()
        # A broken barrier means a client process failed: its outcome below says why.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=300)
        web_cpu = cpu_seconds(workers)
        outcomes = [queue.get(timeout=seconds + 300) for _ in children]
        web_cpu = cpu_seconds(workers) - web_cpu
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
                child.join()
    failed = [outcome.failed for outcome in outcomes if outcome.failed]
    if failed:
        raise SystemExit(f"a client process failed: {failed[0]}")
    web_rss = sum(proc_status("VmRSS", pid) for pid in workers)
    return Load(outcomes, processes, web_cpu, web_rss)


@dataclass
class Raw:
    sequential: list[float]
    rate: float
    errors: int
    threads: int


def raw_exec(ids: list[str], runs: int, seconds: float) -> Raw:
    """The engine's own exec on the sandboxes' containers, as the sandbox user."""
    import docker
    from django.conf import settings

    from hosts.backends.docker.names import SANDBOX_USER, container_ref
    from sandboxes.models import Sandbox

    engine = docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL, timeout=120)
    try:
        states = [Sandbox.objects.get(public_id=sid).backend_state for sid in ids[:10]]
        containers = [engine.containers.get(container_ref(state)) for state in states]

        def echo_in(index: int):
            return lambda: containers[index].exec_run(["echo", "hi"], user=SANDBOX_USER)

        timings(3, echo_in(0))  # warm-up: connection, first exec
        sequential = timings(runs, echo_in(0))
        rate, errors = thread_throughput([echo_in(i) for i in range(len(containers))], seconds)
    finally:
        engine.close()
    return Raw(sequential, rate, errors, len(containers))


# --- the report -------------------------------------------------------------------------------


def line(label: str, seconds: list[float]) -> str:
    return (
        f"{label:<44} n={len(seconds):<5} p50 {ms(statistics.median(seconds)):>9}"
        f"   p99 {ms(percentile(seconds, 99)):>9}   max {ms(max(seconds)):>9}"
    )


def report(args: argparse.Namespace, single: list[float], run: Load, raw: Raw) -> list[str]:
    latencies, errors = run.latencies, run.errors
    rate = len(latencies) / run.elapsed
    raw_p50 = statistics.median(raw.sequential)
    single_p50 = statistics.median(single)
    load_p50 = statistics.median(latencies) if latencies else float("nan")
    load_p99 = percentile(latencies, 99) if latencies else float("nan")
    client_cpu = sum(outcome.cpu for outcome in run.outcomes)
    lines = [
        line("single client run_command `echo hi`", single),
        f"load: {args.clients} clients on {args.clients} sandboxes, {run.elapsed:.1f} s, "
        f"{run.processes} client processes, {args.workers} web workers",
        f"  total commands {len(latencies)}   commands/s {rate:.1f}   errors {len(errors)}",
        line("  run_command `echo hi` under load", latencies) if latencies else "  no commands",
        *[f"  error: {message}" for message in errors[:SHOWN_ERRORS]],
        f"  CPU in the window: web workers {run.web_cpu:.1f} s, clients {client_cpu:.1f} s "
        f"(of {run.elapsed * (os.cpu_count() or 1):.0f} core-seconds)",
        f"  web CPU per command {ms(run.web_cpu / max(1, len(latencies)))}, "
        f"web workers' RSS after the load {run.web_rss / 2**20:.0f} MiB",
        summary("raw docker exec_run `echo hi` (sequential)", raw.sequential),
        f"{f'raw exec_run throughput, {raw.threads} threads':<44} {raw.rate:.1f} execs/s"
        f"   errors {raw.errors}",
        "ratios (this run):",
        f"  single-client p50 / raw exec p50   {single_p50 / raw_p50:6.3f}   (target <= 0.2)",
        f"  load p50 / raw exec p50            {load_p50 / raw_p50:6.3f}",
        f"  load commands/s / raw execs/s      {rate / raw.rate:6.2f}   (target >= 7)",
        "targets: "
        f">= 150 commands/s {'yes' if rate >= 150 else 'no'}, "
        f"p99 <= 300 ms {'yes' if load_p99 <= 0.3 else 'no'}, "
        f"0 errors {'yes' if not errors else 'no'}",
    ]
    return lines


def main() -> None:
    cores = os.cpu_count() or 1
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=cores, help="uvicorn workers")
    parser.add_argument(
        "--client-processes", type=int, default=0, help="default: max(2, cores), at most N"
    )
    parser.add_argument("--single", type=int, default=200, help="single-client calls")
    parser.add_argument("--raw", type=int, default=30, help="sequential raw exec_run runs")
    parser.add_argument("--raw-seconds", type=float, default=10.0)
    args = parser.parse_args()
    processes = min(args.clients, args.client_processes or max(2, cores))

    os.environ["SANDHUB_AGENT"] = "true"
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # no line per request
    instance = bench_instance()
    lift_creation_limits()
    scratch = django_on_scratch_db()
    principal, ids, server = bench_principal(), [], None
    make_room(principal, args.clients)
    try:
        from tenants import apikeys

        key = apikeys.create_key(principal.user, principal.team, name="bench-load").plaintext
        port = free_port()
        server = start_web(port, args.workers, log=scratch / "web.log")
        url = f"http://127.0.0.1:{port}/mcp/"
        create_sandboxes(principal, args.clients, ids, threads=4, memory_mb=256)
        print(f"{len(ids)} sandboxes up; single client ...", flush=True)
        single = asyncio.run(single_client(url, key, ids[0], args.single))
        print(f"load for {args.seconds:.0f} s ...", flush=True)
        run = load(url, key, ids, args.seconds, processes, server.pid)
        raw = raw_exec(ids, args.raw, args.raw_seconds)
        print("\n".join(report(args, single, run, raw)))
    finally:
        if server is not None:
            stop_web(server)
        failures = delete_sandboxes(principal, ids)
        swept = sweep_containers(instance)
        if failures or swept:
            print(f"cleanup: {len(failures)} deletions failed, {swept} containers swept")
        remove_scratch(scratch)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # main's finally has cleaned up by now
        raise SystemExit("interrupted; sandboxes and processes cleaned up") from None
