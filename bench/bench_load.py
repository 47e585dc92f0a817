"""Many MCP clients at once over streamable HTTP, beside the engine's own exec, in one run.

    .venv/bin/python bench/bench_load.py [--clients 20] [--seconds 30] [--workers CORES]
        [--client-processes N] [--single 200] [--raw 30] [--raw-seconds 10]
        [--floor-seconds 10]

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
3. floor: the same client processes and as many web workers call FastMCP's do-nothing tool
   (_floor_app.py: no auth, no database, no sandbox) for --floor-seconds: calls/s and the
   CPU a call costs the web workers and the clients, i.e. what the required MCP stack costs
   before Sandhub does anything;
4. raw: docker SDK `exec_run(["echo", "hi"])` as the sandbox user on one sandbox's container,
   sequential median over --raw runs, then the engine's exec throughput with 10 threads
   (one sandbox container each) for --raw-seconds;
5. ratios from this run: single-client p50 / raw p50, load p50 / raw p50, and load
   commands/s / raw 10-thread execs/s (issue 10: >= 7x);
6. where the CPU went in the load window, a command: web workers, clients, the sandboxes
   (their cgroups: the agent and the commands), the engine's processes (dockerd, containerd,
   the shims) and the rest of the machine (_cpu.py); then what 7x this run's engine would
   leave the web workers once the sandboxes, the engine and the floor's clients are paid
   for, beside the floor's own cost and Sandhub's.

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
from dataclasses import dataclass
from pathlib import Path

import _cpu
from _clients import Outcome, client_process, echo, ignore
from _setup import (
    FLOOR_APP,
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

SHOWN_ERRORS = 5


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


@dataclass
class Load:
    outcomes: list[Outcome]
    processes: int
    web_cpu: float
    web_rss: int  # bytes, all web workers together, after the load
    spent: _cpu.Reading  # the machine's, the engine's and the sandboxes' CPU in the window

    @property
    def latencies(self) -> list[float]:
        return [s for outcome in self.outcomes for s in outcome.latencies]

    @property
    def errors(self) -> list[str]:
        return [e for outcome in self.outcomes for e in outcome.errors]

    @property
    def elapsed(self) -> float:
        return max(outcome.elapsed for outcome in self.outcomes)

    @property
    def client_cpu(self) -> float:
        return sum(outcome.cpu for outcome in self.outcomes)

    def per_call(self, seconds: float) -> float:
        return seconds / max(1, len(self.latencies))


def load(
    probe: str,
    url: str,
    key: str | None,
    ids: list[str],
    seconds: float,
    processes: int,
    web_pid: int,
    usage_files: list[Path],
) -> Load:
    """`probe` (_clients.PROBES) from one client a sandbox id, spread over `processes`."""
    context = multiprocessing.get_context("spawn")  # no Django, threads or sockets inherited
    barrier = context.Barrier(processes + 1)
    queue = context.Queue()
    shares = [ids[i::processes] for i in range(processes)]
    children = [
        context.Process(
            target=client_process, args=(probe, url, key, share, seconds, barrier, queue)
        )
        for share in shares
    ]
    workers = child_pids(web_pid)
    try:
        for child in children:
            child.start()
        # A broken barrier means a client process failed: its outcome below says why.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=300)
        web_before, before = _cpu.pids_cpu(workers), _cpu.read(usage_files)
        outcomes = [queue.get(timeout=seconds + 300) for _ in children]
        web_cpu = _cpu.pids_cpu(workers) - web_before
        spent = _cpu.spent(before, _cpu.read(usage_files))
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
    return Load(outcomes, processes, web_cpu, web_rss, spent)


def floor(clients: int, seconds: float, processes: int, workers: int, log: Path) -> Load:
    """The same clients and web workers on FastMCP's do-nothing tool (_floor_app.py): what
    the required MCP stack costs a call before Sandhub does anything."""
    port = free_port()
    server = start_web(port, workers, log=log, app=FLOOR_APP)
    try:
        url = f"http://127.0.0.1:{port}/mcp/"
        return load("ping", url, None, [""] * clients, seconds, processes, server.pid, [])
    finally:
        stop_web(server)


def sandbox_usage_files(ids: list[str]) -> list[Path]:
    """The CPU counters of the sandboxes' cgroups: the agent and every command it ran."""
    import docker
    from django.conf import settings

    from hosts.backends.docker.names import container_ref
    from sandboxes.models import Sandbox

    engine = docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL, timeout=120)
    try:
        files = []
        for sid in ids:
            state = Sandbox.objects.get(public_id=sid).backend_state
            pid = engine.containers.get(container_ref(state)).attrs["State"]["Pid"]
            usage = _cpu.cgroup_usage_file(pid)
            if usage is None:
                raise SystemExit(f"no CPU counter found for the cgroup of {sid} (pid {pid})")
            files.append(usage)
        return files
    finally:
        engine.close()


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


def cpu_lines(run: Load, base: Load | None, engine_rate: float) -> list[str]:
    """What a command cost each party, and what 7x the engine would leave the web workers."""
    cores = os.cpu_count() or 1
    spent = run.spent
    web, clients = run.per_call(run.web_cpu), run.per_call(run.client_cpu)
    sandboxes, engine = run.per_call(spent.containers), run.per_call(spent.engine)
    rest = run.per_call(spent.machine) - web - clients - sandboxes - engine
    lines = [
        f"CPU a command in the load window (machine busy {spent.machine:.1f} of "
        f"{run.elapsed * cores:.0f} core-seconds):",
        f"  web workers {ms(web)}, clients {ms(clients)}, sandboxes (agent and command) "
        f"{ms(sandboxes)}, engine (dockerd, containerd, shims) {ms(engine)}, the rest {ms(rest)}",
    ]
    if base is None or not base.latencies:
        return lines
    floor_web, floor_clients = base.per_call(base.web_cpu), base.per_call(base.client_cpu)
    target = 7 * engine_rate
    budget = cores / target  # the CPU a command may cost in all at 7x, every core busy
    left = budget - floor_clients - sandboxes - engine
    return [
        *lines,
        f"floor: FastMCP's do-nothing tool, same clients and web workers, {base.elapsed:.0f} s: "
        f"{len(base.latencies) / base.elapsed:.0f} calls/s, web {ms(floor_web)} and clients "
        f"{ms(floor_clients)} a call, errors {len(base.errors)}",
        f"7x this run's engine = {target:.0f} commands/s = {ms(budget)} of CPU a command on "
        f"{cores} cores; the sandboxes, the engine and the floor's clients take "
        f"{ms(budget - left)},",
        f"  leaving {ms(left)} for the web workers (the floor's alone: {ms(floor_web)}; "
        f"Sandhub's now: {ms(web)})",
    ]


def report(args: argparse.Namespace, single: list[float], run: Load, raw: Raw) -> list[str]:
    latencies, errors = run.latencies, run.errors
    rate = len(latencies) / run.elapsed
    raw_p50 = statistics.median(raw.sequential)
    single_p50 = statistics.median(single)
    load_p50 = statistics.median(latencies) if latencies else float("nan")
    load_p99 = percentile(latencies, 99) if latencies else float("nan")
    lines = [
        line("single client run_command `echo hi`", single),
        f"load: {args.clients} clients on {args.clients} sandboxes, {run.elapsed:.1f} s, "
        f"{run.processes} client processes, {args.workers} web workers",
        f"  total commands {len(latencies)}   commands/s {rate:.1f}   errors {len(errors)}",
        line("  run_command `echo hi` under load", latencies) if latencies else "  no commands",
        *[f"  error: {message}" for message in errors[:SHOWN_ERRORS]],
        f"  CPU in the window: web workers {run.web_cpu:.1f} s, clients {run.client_cpu:.1f} s "
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
    parser.add_argument("--floor-seconds", type=float, default=10.0, help="0: no floor phase")
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
        usage_files = sandbox_usage_files(ids)
        run = load("echo", url, key, ids, args.seconds, processes, server.pid, usage_files)
        base = None
        if args.floor_seconds > 0:
            print(f"floor for {args.floor_seconds:.0f} s ...", flush=True)
            base = floor(args.clients, args.floor_seconds, processes, args.workers, scratch / "f")
        raw = raw_exec(ids, args.raw, args.raw_seconds)
        print("\n".join(report(args, single, run, raw)))
        print("\n".join(cpu_lines(run, base, raw.rate)))
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
