"""MCP over streamable HTTP against the service layer, on the local Docker engine.

    .venv/bin/python bench/bench_mcp.py [--runs 200] [--creates 20]

Starts uvicorn (platform_site.asgi, a separate process) on a free loopback port against a
throwaway SQLite database under var/, then measures with a real fastmcp.Client:
run_command `true` round trips on a warm sandbox and create_sandbox calls, and the same two
operations called directly on sandboxes.services in this process, for comparison. Each new
sandbox is deleted right after its timed creation (untimed), so hosts never fill up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from _setup import ROOT, bench_principal, summary


def django_on_bench_db(path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "platform_site.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=dict(os.environ),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            if server.poll() is not None:
                raise SystemExit("uvicorn exited during start-up") from None
            time.sleep(0.1)
    server.terminate()
    raise SystemExit("uvicorn did not start")


async def bench_mcp(url: str, key: str, runs: int, creates: int) -> list[str]:
    from fastmcp import Client

    async with Client(url, auth=key) as client:
        warm = (await client.call_tool("create_sandbox", {"memory_mb": 256})).data.id
        for _ in range(5):
            await client.call_tool("run_command", {"sandbox_id": warm, "command": "true"})
        run_times = []
        for _ in range(runs):
            started = time.perf_counter()
            await client.call_tool("run_command", {"sandbox_id": warm, "command": "true"})
            run_times.append(time.perf_counter() - started)
        create_times = []
        for _ in range(creates):
            started = time.perf_counter()
            result = await client.call_tool("create_sandbox", {"memory_mb": 256, "select": False})
            create_times.append(time.perf_counter() - started)
            await client.call_tool("delete_sandbox", {"sandbox_id": result.data.id})
        await client.call_tool("delete_sandbox", {"sandbox_id": warm})
    return [
        summary("MCP/HTTP run_command `true` (round trip)", run_times),
        summary("MCP/HTTP create_sandbox (round trip)", create_times),
    ]


def bench_services(runs: int, creates: int) -> list[str]:
    from sandboxes import services

    principal = bench_principal()
    warm = services.create_sandbox(principal, memory_mb=256).id
    for _ in range(5):
        services.run_command(principal, warm, "true")
    run_times = []
    for _ in range(runs):
        started = time.perf_counter()
        services.run_command(principal, warm, "true")
        run_times.append(time.perf_counter() - started)
    create_times = []
    for _ in range(creates):
        started = time.perf_counter()
        created = services.create_sandbox(principal, memory_mb=256).id
        create_times.append(time.perf_counter() - started)
        services.delete_sandbox(principal, created)
    services.delete_sandbox(principal, warm)
    return [
        summary("service run_command `true`", run_times),
        summary("service create_sandbox", create_times),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--creates", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # no line per request

    database = ROOT / "var" / f"bench-mcp-{os.getpid()}.sqlite3"
    database.parent.mkdir(exist_ok=True)
    django_on_bench_db(database)
    from tenants import apikeys

    principal = bench_principal(channel="mcp")
    key = apikeys.create_key(principal.user, principal.team, name="bench").plaintext
    port = free_port()
    server = start_server(port)
    try:
        lines = asyncio.run(
            bench_mcp(f"http://127.0.0.1:{port}/mcp/", key, args.runs, args.creates)
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    lines += bench_services(args.runs, args.creates)
    database.unlink(missing_ok=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
