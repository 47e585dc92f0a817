"""What /metrics costs (issue 28): the instrumentation's share of an MCP call, and a scrape.

    .venv/bin/python bench/bench_metrics.py [--calls 300] [--sandboxes 100,1000,5000]

On a throwaway SQLite database, two uvicorn processes side by side: platform_site.asgi as
it runs (instruments on, in multiprocess mode: PROMETHEUS_MULTIPROC_DIR set, values in
mmapped files) and the same app with the instruments taken out (bench/_unmetered_app.py).
A fastmcp client on each calls list_sandboxes, alternating call by call so both see the same
load; the medians and their difference are printed. Then sandbox rows (rows only: the
scrape reads the database, no engine is involved) are added up to each count, and GET
/metrics is timed over HTTP, with the queries one scrape makes counted in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import httpx2 as httpx
from _setup import (
    ROOT,
    bench_principal,
    django_on_scratch_db,
    free_port,
    percentile,
    remove_scratch,
    start_web,
    stop_web,
)

TOKEN = secrets.token_hex(24)


def _api_key(principal) -> str:
    from tenants import apikeys

    return apikeys.create_key(
        principal.user, principal.team, name="bench", scopes="read,write"
    ).plaintext


async def _alternating(servers: dict[str, str], key: str, calls: int) -> dict[str, list[float]]:
    from fastmcp import Client

    times: dict[str, list[float]] = {name: [] for name in servers}
    clients = {name: Client(f"{url}/mcp/", auth=key) for name, url in servers.items()}
    for client in clients.values():
        await client.__aenter__()
    try:
        for client in clients.values():  # warm-up: schemas, connections, first queries
            for _ in range(10):
                await client.call_tool("list_sandboxes", {})
        order = list(clients.items())
        for _ in range(calls):
            random.shuffle(order)  # neither server always goes first (caches, scheduling)
            for name, client in order:
                started = time.perf_counter()
                await client.call_tool("list_sandboxes", {})
                times[name].append(time.perf_counter() - started)
    finally:
        for client in clients.values():
            await client.__aexit__(None, None, None)
    return times


def _add_sandboxes(principal, total: int) -> None:
    from hosts.models import Host, Image
    from sandboxes.models import Sandbox

    host, image = Host.objects.get(name="local"), Image.objects.get(name="python")
    missing = total - Sandbox.objects.count()
    statuses = ["running", "running", "paused", "stopped"]
    Sandbox.objects.bulk_create(
        Sandbox(
            team=principal.team,
            host=host,
            image=image,
            status=statuses[n % len(statuses)],
            cpus=1,
            memory_mb=256,
            pids_limit=64,
        )
        for n in range(max(missing, 0))
    )


def _scrape_queries() -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from platform_site.metrics.exposition import scrape

    with CaptureQueriesContext(connection) as queries:
        scrape()
    return len(queries)


def _scrape_times(url: str, runs: int) -> list[float]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    times = []
    with httpx.Client(headers=headers) as client:
        for _ in range(runs):
            started = time.perf_counter()
            answer = client.get(f"{url}/metrics")
            times.append(time.perf_counter() - started)
            answer.raise_for_status()
    return times


def _recording_cost(runs: int = 20000) -> float:
    """Seconds one request's and one MCP call's recording take in multiprocess mode, in a
    process of their own (the mode is chosen when prometheus_client is first imported)."""
    code = (
        "import time\nfrom sandboxes.metrics import instruments as i\n"
        f"n = {runs}\nstarted = time.perf_counter()\n"
        "for _ in range(n):\n"
        "    i.http_request('POST', 'mcp', 200, 0.01)\n"
        "    i.mcp_call('list_sandboxes', 'ok', 0.01)\n"
        "print((time.perf_counter() - started) / n)\n"
    )
    with tempfile.TemporaryDirectory() as directory:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": directory}
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--sandboxes", default="100,1000,5000")
    parser.add_argument("--scrapes", type=int, default=20)
    options = parser.parse_args()

    logging.getLogger("httpx2").setLevel(logging.WARNING)  # no line per request
    recording = _recording_cost()
    print(f"recording one request and one MCP call (multiprocess mode): {recording * 1e6:.1f} us")
    scratch = django_on_scratch_db()
    metrics_dir = tempfile.mkdtemp(prefix="sandhub-bench-metrics-")
    os.environ["SANDHUB_METRICS_TOKEN"] = TOKEN
    principal = bench_principal("mcp")
    key = _api_key(principal)
    servers, processes = {}, []
    try:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        port = free_port()
        processes.append(start_web(port))
        servers["metrics on"] = f"http://127.0.0.1:{port}"
        del os.environ["PROMETHEUS_MULTIPROC_DIR"]
        port = free_port()
        processes.append(start_web(port, app="bench._unmetered_app:application"))
        servers["metrics off"] = f"http://127.0.0.1:{port}"

        times = asyncio.run(_alternating(servers, key, options.calls))
        medians = {name: statistics.median(seconds) for name, seconds in times.items()}
        for name, seconds in times.items():
            p50, p95 = medians[name] * 1000, percentile(seconds, 95) * 1000
            print(
                f"list_sandboxes {name:<11} n={len(seconds)} p50 {p50:6.2f} ms, p95 {p95:6.2f} ms"
            )
        added = medians["metrics on"] - medians["metrics off"]
        print(f"instrumentation's cost per MCP call (p50 on - off): {added * 1000:+.2f} ms")

        for count in [int(n) for n in options.sandboxes.split(",") if n]:
            _add_sandboxes(principal, count)
            seconds = _scrape_times(servers["metrics on"], options.scrapes)
            p50, p95 = statistics.median(seconds) * 1000, percentile(seconds, 95) * 1000
            queries = _scrape_queries()
            print(
                f"GET /metrics with {count:>6} sandboxes: p50 {p50:6.2f} ms  p95 {p95:6.2f} ms, "
                f"{queries} queries"
            )
    finally:
        for process in processes:
            stop_web(process)
        remove_scratch(scratch)
        shutil.rmtree(metrics_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
