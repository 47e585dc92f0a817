"""Resume from pause through the services, beside the engine's own unpause, in one run.

    .venv/bin/python bench/lifecycle_pause.py [--rounds 30]

On the local Docker engine: a sandbox is paused (services.pause_sandbox), then a command
runs on it (services.run_command resumes it first; its result's resumed_seconds is the
resume part: the claim, the engine's unpause, the settlement and its audit row). Beside it,
in the same rounds, a plain container of the same image is paused and unpaused with the
docker SDK (container.pause() / unpause(), the unpause timed). Prints both p50s and their
ratio (issue 25's target: resume p50 <= 2 x the engine's unpause p50).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _setup import (
    bench_instance,
    bench_principal,
    django_on_scratch_db,
    percentile,
    remove_scratch,
    sweep_containers,
)


def measure(rounds: int) -> list[str]:
    """The report's lines: resume p50 (services), unpause p50 (docker SDK), their ratio."""
    instance = bench_instance()
    scratch = django_on_scratch_db()
    try:
        return _rounds(rounds)
    finally:
        sweep_containers(instance)
        remove_scratch(scratch)


def _rounds(rounds: int) -> list[str]:
    import docker
    from django.conf import settings

    from sandboxes import services

    principal = bench_principal()
    client = docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL)
    sandbox_id = services.create_sandbox(principal, memory_mb=256).id
    plain = client.containers.run(
        settings.SANDHUB_SANDBOX_IMAGE,
        detach=True,
        network_mode="none",
        mem_limit="256m",
        # This run's instance label: sweep_containers removes it should the run fail.
        labels={"org.sandhub.bench": "1", "org.sandhub.instance": os.environ["SANDHUB_INSTANCE"]},
    )
    resumes, unpauses, commands = [], [], []
    try:
        services.run_command(principal, sandbox_id, "true")  # the agent is up
        for _ in range(rounds):
            services.pause_sandbox(principal, sandbox_id)
            started = time.perf_counter()
            result = services.run_command(principal, sandbox_id, "true")
            commands.append(time.perf_counter() - started)
            assert result.resumed_seconds is not None and result.exit_code == 0, result
            resumes.append(result.resumed_seconds)
            plain.pause()
            started = time.perf_counter()
            plain.unpause()
            unpauses.append(time.perf_counter() - started)
    finally:
        plain.remove(force=True)
        services.delete_sandbox(principal, sandbox_id)
        client.close()
    resume, unpause = statistics.median(resumes), statistics.median(unpauses)
    return [
        f"rounds: {rounds}",
        f"services resume from pause (resumed_seconds): p50 {resume * 1000:.1f} ms, "
        f"p95 {percentile(resumes, 95) * 1000:.1f} ms",
        f"  its command, resume included:                p50 "
        f"{statistics.median(commands) * 1000:.1f} ms",
        f"docker SDK container.unpause():              p50 {unpause * 1000:.1f} ms, "
        f"p95 {percentile(unpauses, 95) * 1000:.1f} ms",
        f"ratio resume / unpause (p50): {resume / unpause:.2f} (target <= 2)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    for line in measure(args.rounds):
        print(line)


if __name__ == "__main__":
    main()
