"""The local engine (unix socket) against a second engine over TCP with TLS, in one run.

    .venv/bin/python bench/bench_engines.py [--creates 5] [--echoes 200]

Starts a second dockerd on this machine (tests/cluster/dockerd2.py: TLS with certificates it
makes, the sandbox image loaded once per machine; needs root), adds it with add_host as an
operator would, and through the services, on each engine in turn: create + first command
(`echo hi`) of new sandboxes, sequential, then `echo hi` on one sandbox (the agent's path).
Prints median and p95 of each, and the TLS engine's ratio to the local one. Both engines run
on the same machine: the ratio is the cost of TCP + TLS and of the engine's own round trips,
not of a network. Figures vary between days: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _setup import ROOT, bench_instance, bench_principal, django_on_scratch_db, remove_scratch
from _setup import summary as line


def timed(action) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def engine_exec(host_name: str, sandbox_id: str, count: int) -> list[float]:
    """`echo hi` by the engine's own exec (create, start, inspect: the per-command path's
    round trips), straight through the host's client."""
    from hosts.backends import get_backend
    from hosts.models import Host

    client = get_backend(Host.objects.get(name=host_name)).engine.client()  # type: ignore[attr-defined]
    container = client.containers.get(f"sandhub-{sandbox_id}")
    return [timed(lambda: container.exec_run(["echo", "hi"], user="1000")) for _ in range(count)]


def measure(
    principal, host_name: str, creates: int, echoes: int
) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """(create + first command, echo) seconds on host `host_name` only."""
    from hosts.models import Host
    from sandboxes import services

    Host.objects.update(enabled=False)
    Host.objects.filter(name=host_name).update(enabled=True, healthy=True)
    made: list[str] = []
    first: list[float] = []
    try:
        for _ in range(creates):
            started = time.perf_counter()
            info = services.create_sandbox(principal, memory_mb=256, cpus=0.5)
            made.append(info.id)
            assert services.run_command(principal, info.id, "echo hi").stdout == "hi\n"
            first.append(time.perf_counter() - started)
        sandbox = made[0]
        for _ in range(5):  # warm: the agent of this sandbox is running after these
            services.run_command(principal, sandbox, "echo hi")
        echo = [
            timed(lambda: services.run_command(principal, sandbox, "echo hi"))
            for _ in range(echoes)
        ]
        raw = engine_exec(host_name, sandbox, max(20, echoes // 4))
    finally:
        for sandbox_id in made:
            services.delete_sandbox(principal, sandbox_id)
    return first, echo, raw


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--creates", type=int, default=5)
    parser.add_argument("--echoes", type=int, default=200)
    parser.add_argument("--name", default="dockerd2", help="the second engine's (data root)")
    args = parser.parse_args()
    os.environ["SANDHUB_INSTANCE"] = bench_instance()
    scratch = django_on_scratch_db()
    from tests.cluster.dockerd2 import SecondEngine, unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"bench_engines: {reason}")
    engine = SecondEngine.start(
        Path(tempfile.mkdtemp(prefix="sandhub-bench-dockerd2-")), name=args.name
    )
    try:
        principal = bench_principal()
        engine.register("engine-2")
        results = {
            name: measure(principal, name, args.creates, args.echoes)
            for name in ("local", "engine-2")
        }
    finally:
        engine.stop()
        remove_scratch(scratch)
    (local_first, local_echo, local_raw) = results["local"]
    (tls_first, tls_echo, tls_raw) = results["engine-2"]
    print(f"engines on this machine: local unix socket vs {engine.url} (TLS), {ROOT.name}")
    print(line("create + first command, local (unix)", local_first))
    print(line("create + first command, remote (TCP+TLS)", tls_first))
    print(line("echo, local (unix)", local_echo))
    print(line("echo, remote (TCP+TLS)", tls_echo))
    print(line("engine exec echo, local (unix)", local_raw))
    print(line("engine exec echo, remote (TCP+TLS)", tls_raw))
    create_ratio = statistics.median(tls_first) / statistics.median(local_first)
    echo_ratio = statistics.median(tls_echo) / statistics.median(local_echo)
    raw_ratio = statistics.median(tls_raw) / statistics.median(local_raw)
    print(
        f"ratio TLS/local: create+first p50 {create_ratio:.2f}, echo p50 {echo_ratio:.2f}, "
        f"engine exec p50 {raw_ratio:.2f}"
    )


if __name__ == "__main__":
    main()
