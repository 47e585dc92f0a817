"""Keystroke echo through the platform's terminal websocket, beside the agent's raw round trip
in the same run, and what 20 open idle terminals add to the web process (issue 26: echo p50
<= 10 ms through the platform; 20 idle terminals add at most 20 MB).

    .venv/bin/python bench/bench_terminal.py [--keys 300] [--idle 20]

Starts uvicorn (platform_site.asgi, a separate process, as `make run` does) on a throwaway
SQLite database, creates a sandbox on the local Docker engine, opens a terminal and types
`cat > /dev/null` in it, so each byte typed is echoed by the sandbox's tty and nothing else
prints. Then, one byte at a time (and an untimed Enter after each, so the line never fills):

1. raw: this process attaches to the terminal through the backend (the sandbox agent's
   stream, attach_terminal) and times a byte written until its echo is read;
2. platform: this process, as a browser would (the session cookie, the platform's Origin),
   over the web process's websocket /ws/sandboxes/SANDBOX/terminals/TERMINAL/.

Last, the web process's RSS (/proc/PID/status VmRSS) after one warm-up connection, then with
--idle more terminals open, each with its websocket connected and its scrollback read.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from typing import Any

from _setup import (
    bench_instance,
    bench_principal,
    django_on_scratch_db,
    free_port,
    lift_creation_limits,
    percentile,
    proc_status,
    remove_scratch,
    start_web,
    stop_web,
    sweep_containers,
)

WARM_UP = 20
MARK = b"cat > /dev/null"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


def echo_times(write, read_until, count: int) -> list[float]:
    """Seconds from a byte written to its echo read, `count` times (after WARM_UP untimed).
    First a line of its own is typed and read back, so the scrollback replayed on attach
    (earlier runs' echoes) is all read before the first byte is timed."""
    sync = f"sync-{time.time_ns()}".encode()
    write(sync + b"\r")
    read_until(sync + b"\r\n")
    seconds = []
    for index in range(WARM_UP + count):
        started = time.perf_counter()
        write(b"a")
        read_until(b"a")
        elapsed = time.perf_counter() - started
        write(b"\r")
        read_until(b"\n")
        if index >= WARM_UP:
            seconds.append(elapsed)
    return seconds


def reader(read) -> Any:
    """read_until(wanted): reads until `wanted` came (what came after it is kept)."""
    buffer = bytearray()

    def read_until(wanted: bytes) -> None:
        while True:
            at = buffer.find(wanted)
            if at >= 0:
                del buffer[: at + len(wanted)]
                return
            chunk = read()
            if not chunk:
                raise SystemExit("the terminal ended")
            buffer.extend(chunk)

    return read_until


def raw_round_trips(sandbox, terminal_id: str, count: int) -> list[float]:
    from hosts.backends import get_backend

    backend = get_backend(sandbox.host)
    with backend.attach_terminal(sandbox.backend_state, terminal_id) as stream:
        read_until = reader(lambda: stream.read(65536, timeout=10))
        return echo_times(stream.write, read_until, count)


def socket_for(base: str, sandbox_id: str, terminal_id: str, cookie: str):
    from websockets.sync.client import connect

    url = f"ws://{base}/ws/sandboxes/{sandbox_id}/terminals/{terminal_id}/"
    return connect(
        url, origin=f"http://{base}", additional_headers={"Cookie": cookie}, max_size=None
    )  # type: ignore[arg-type]


def platform_round_trips(base, sandbox_id, terminal_id, cookie, count: int) -> list[float]:
    with socket_for(base, sandbox_id, terminal_id, cookie) as socket:
        read_until = reader(lambda: socket.recv(timeout=10))
        return echo_times(socket.send, read_until, count)


def session_cookie(user) -> str:
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


RETRIES: list[str] = []


def open_retrying(principal, sandbox_id: str) -> str:
    """A terminal's id; a failed start is tried again (and counted: see the report)."""
    from sandboxes import services
    from sandboxes.contract.errors import BackendFailure

    for attempt in range(3):
        try:
            return services.open_terminal(principal, sandbox_id).id
        except BackendFailure as exc:
            RETRIES.append(str(exc)[-200:])
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def idle_memory(base, principal, sandbox_id, cookie, web_pid: int, count: int) -> tuple[int, int]:
    """The web process's RSS with no terminal connected (after a warm-up one) and with
    `count` idle ones connected."""
    from sandboxes import services

    opened = [open_retrying(principal, sandbox_id) for _ in range(count + 1)]
    with socket_for(base, sandbox_id, opened[0], cookie) as warm:
        warm.recv(timeout=10)
    time.sleep(2)  # the warm-up connection's reader thread ends within a second
    before = proc_status("VmRSS", web_pid)
    try:
        with contextlib.ExitStack() as stack:
            for terminal_id in opened[1:]:
                socket = stack.enter_context(socket_for(base, sandbox_id, terminal_id, cookie))
                socket.recv(timeout=10)  # its prompt: attached
            time.sleep(3)
            after = proc_status("VmRSS", web_pid)
    finally:
        for terminal_id in opened:
            services.close_terminal(principal, sandbox_id, terminal_id)
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument("--idle", type=int, default=20)
    args = parser.parse_args()
    instance = bench_instance()
    lift_creation_limits()
    os.environ["SANDHUB_MAX_TERMINALS_PER_SANDBOX"] = str(args.idle + 5)
    scratch = django_on_scratch_db()
    from sandboxes import services
    from sandboxes.models import Sandbox, Terminal

    principal = bench_principal(channel="web")
    cookie = session_cookie(principal.user)
    port = free_port()
    server = start_web(port, log=scratch / "web.log")
    base = f"127.0.0.1:{port}"
    box = None
    try:
        box = services.create_sandbox(principal, memory_mb=512).id
        terminal = services.open_terminal(principal, box)
        with socket_for(base, box, terminal.id, cookie) as socket:
            read = reader(lambda: socket.recv(timeout=10))
            socket.send(MARK + b"\r")
            read(MARK)
        sandbox = Sandbox.objects.select_related("host").get(public_id=box)
        backend_id = Terminal.objects.get(terminal_id=terminal.id).backend_id
        raw = raw_round_trips(sandbox, backend_id, args.keys)
        through = platform_round_trips(base, box, terminal.id, cookie, args.keys)
        print(f"keystroke echo, {args.keys} bytes each way, one at a time:")
        for label, seconds in (
            ("agent, raw (attach_terminal)", raw),
            ("platform websocket", through),
        ):
            print(
                f"  {label:<32} p50 {ms(statistics.median(seconds))}   "
                f"p90 {ms(percentile(seconds, 90))}   p99 {ms(percentile(seconds, 99))}"
            )
        overhead = statistics.median(through) - statistics.median(raw)
        print(f"  {'platform over raw, p50':<32}     {ms(overhead)}", flush=True)
        before, after = idle_memory(base, principal, box, cookie, server.pid, args.idle)
        print(f"web process RSS ({server.pid}):")
        print(f"  {'no terminal connected':<32} {before / 2**20:7.1f} MiB")
        print(f"  {f'{args.idle} idle terminals connected':<32} {after / 2**20:7.1f} MiB")
        print(f"  {'added (target <= 20 MB)':<32} {(after - before) / 2**20:7.1f} MiB")
        if RETRIES:
            print(f"terminal starts tried again: {len(RETRIES)}; last: {RETRIES[-1]}")
    finally:
        if box is not None:
            services.delete_sandbox(principal, box)
        stop_web(server)
        sweep_containers(instance)
        remove_scratch(scratch)


if __name__ == "__main__":
    main()
