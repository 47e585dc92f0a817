"""What a usage sampling round costs (sandboxes/housekeeping/usage.py).

    .venv/bin/python bench/bench_usage.py [--sandboxes 20] [--memory-mb 64] [--rounds 3]

Runs the service layer in this process on a throwaway SQLite database (as
bench_idle_agents.py does), creates --sandboxes sandboxes on this machine's Docker engine
(per-sandbox disks off: a disk does not change what a sample costs, mkfs would dominate the
setup), then times --rounds rounds:

1. with no agent running in this process (the sampling task's worker, mostly): one exec of
   the shell script per sandbox (an agent is never started only to sample);
2. after a command in each sandbox started its agent (the web process, mostly): one request
   on each agent's open stream.

For each: the wall time of the round, this process's CPU time for it, and the rows written.
Every sandbox is deleted at the end, also after an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from _setup import (
    bench_instance,
    bench_principal,
    create_sandboxes,
    delete_sandboxes,
    django_on_scratch_db,
    lift_creation_limits,
    make_room,
    remove_scratch,
    sweep_containers,
)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed_round() -> tuple[float, float, int, int]:
    from sandboxes.housekeeping import usage

    wall, cpu = time.monotonic(), cpu_seconds()
    report = usage.sample_round()
    return time.monotonic() - wall, cpu_seconds() - cpu, report.sampled, len(report.failed)


def line(label: str, wall: float, cpu: float, sampled: int, failed: int, count: int) -> str:
    return (
        f"{label:<34} wall {wall * 1000:7.0f} ms  platform CPU {cpu * 1000:6.0f} ms "
        f"({cpu * 1000 / max(count, 1):5.1f} ms a sandbox)  sampled {sampled}, failed {failed}"
    )


def measure(principal, ids: list[str], rounds: int) -> list[str]:
    from sandboxes import services

    count = len(ids)
    lines = [line(f"round {n + 1}, no agent: exec", *timed_round(), count) for n in range(rounds)]
    for sandbox_id in ids:  # as the web process has them once commands ran: agents up
        services.run_command(principal, sandbox_id, "true")
    lines += [line(f"round {n + 1}, agents up", *timed_round(), count) for n in range(rounds)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sandboxes", type=int, default=20)
    parser.add_argument("--memory-mb", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="creating and deleting")
    args = parser.parse_args()

    os.environ["SANDHUB_AGENT"] = "true"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    instance = bench_instance()
    lift_creation_limits()
    scratch = django_on_scratch_db()
    from hosts.models import Host

    principal = bench_principal()
    make_room(principal, args.sandboxes)
    for host in Host.objects.all():
        host.options = {**host.options, "disk_limit": False}
        host.save(update_fields=["options"])
    ids: list[str] = []
    lines: list[str] = []
    try:
        create_sandboxes(principal, args.sandboxes, ids, args.threads, memory_mb=args.memory_mb)
        lines = [f"{len(ids)} sandboxes", *measure(principal, ids, args.rounds)]
    finally:
        failures = delete_sandboxes(principal, ids, args.threads)
        swept = sweep_containers(instance)
        print(f"cleanup: {len(ids)} deleted, {len(failures)} failed, {swept} containers swept")
        remove_scratch(scratch)
    print("\n".join(lines))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        raise SystemExit("interrupted; sandboxes deleted") from None
