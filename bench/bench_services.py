"""Service-layer timings on the local Docker engine, beside raw docker SDK timings.

    .venv/bin/python bench/bench_services.py [--creates 20] [--runs 100]

Prints create_sandbox (service call to running) and run_command `true`, median and p95,
and the same engine operations done directly with the docker SDK for comparison; then
run_command `echo hi` (through the sandbox agent when SANDHUB_AGENT is on) beside a raw
`exec_run` of `echo hi` in the same run, and their ratio (issue 10's target: <= 0.1).
"""

from __future__ import annotations

import argparse
import statistics
import time

from _setup import bench_principal, django_on_scratch_db, summary


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


ECHO: dict[str, list[float]] = {}  # `echo hi` timings of this run: "service", "raw"


def bench_service_layer(creates: int, runs: int) -> list[str]:
    from sandboxes import services

    principal = bench_principal()
    create_times, ids = [], []
    for _ in range(creates):
        started = time.perf_counter()
        ids.append(services.create_sandbox(principal, memory_mb=256).id)
        create_times.append(time.perf_counter() - started)
    warm = ids[0]
    services.run_command(principal, warm, "true")
    run_times = [timed(lambda: services.run_command(principal, warm, "true")) for _ in range(runs)]
    ECHO["service"] = [
        timed(lambda: services.run_command(principal, warm, "echo hi")) for _ in range(runs)
    ]
    delete_times = [timed(lambda sid=sid: services.delete_sandbox(principal, sid)) for sid in ids]
    return [
        summary("service create_sandbox (call to running)", create_times),
        summary("service run_command `true`", run_times),
        summary("service run_command `echo hi`", ECHO["service"]),
        summary("service delete_sandbox", delete_times),
    ]


def bench_raw_sdk(creates: int, runs: int) -> list[str]:
    import docker
    from django.conf import settings

    client = docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL)
    start_times, containers = [], []
    for _ in range(creates):
        started = time.perf_counter()
        container = client.containers.run(
            settings.SANDHUB_SANDBOX_IMAGE,
            detach=True,
            network_mode="none",
            labels={"org.sandhub.bench": "1"},
        )
        start_times.append(time.perf_counter() - started)
        containers.append(container)
    exec_times = [timed(lambda: containers[0].exec_run(["true"])) for _ in range(runs)]
    ECHO["raw"] = [timed(lambda: containers[0].exec_run(["echo", "hi"])) for _ in range(runs)]
    for container in containers:
        container.remove(force=True)
    client.close()
    return [
        summary("raw docker SDK containers.run (create+start)", start_times),
        summary("raw docker SDK exec_run `true`", exec_times),
        summary("raw docker SDK exec_run `echo hi`", ECHO["raw"]),
    ]


def ratio_line() -> str:
    from django.conf import settings

    service, raw = statistics.median(ECHO["service"]), statistics.median(ECHO["raw"])
    path = "agent" if settings.SANDHUB_AGENT else "per-command exec"
    return (
        f"run_command `echo hi` p50 {service * 1000:.1f} ms ({path}) / raw exec_run p50 "
        f"{raw * 1000:.1f} ms = {service / raw:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--creates", type=int, default=20)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    django_on_scratch_db()
    lines = bench_service_layer(args.creates, args.runs) + bench_raw_sdk(args.creates, args.runs)
    print("\n".join([*lines, ratio_line()]))


if __name__ == "__main__":
    main()
