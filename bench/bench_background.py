"""Background commands on the local Docker engine: how soon a started command can be followed.

    .venv/bin/python bench/bench_background.py [--runs 20]

Each run starts `echo ready; sleep 30` with start_background and checks it at once with
check_background. Prints, median and p95 over the runs:

- start_background alone (the call returns once the job runs detached in the sandbox);
- start-to-first-check: from the start call until the first check has answered;
- start-to-output: from the start call until a check shows the command's first line;
- cancel_background (SIGTERM to the job's session, the job exits, the end is recorded).

No worker is needed: check and cancel read and act on the sandbox directly.
"""

from __future__ import annotations

import argparse
import time

from _setup import bench_principal, django_on_scratch_db, summary


def bench(runs: int) -> list[str]:
    from sandboxes import services

    principal = bench_principal()
    sandbox = services.create_sandbox(principal, memory_mb=256).id
    starts, first_checks, outputs, cancels = [], [], [], []
    try:
        services.run_command(principal, sandbox, "true")  # warm the engine connection
        for _ in range(runs):
            began = time.perf_counter()
            started = services.start_background(principal, sandbox, "echo ready; sleep 30")
            starts.append(time.perf_counter() - began)
            check = services.check_background(principal, sandbox, started.id)
            first_checks.append(time.perf_counter() - began)
            while "ready" not in check.output:
                check = services.check_background(principal, sandbox, started.id)
            outputs.append(time.perf_counter() - began)
            assert check.running, check
            began = time.perf_counter()
            cancelled = services.cancel_background(principal, sandbox, started.id)
            cancels.append(time.perf_counter() - began)
            assert cancelled.status == "cancelled", cancelled
    finally:
        services.delete_sandbox(principal, sandbox)
    return [
        summary("start_background (call to detached job)", starts),
        summary("start to first check_background answer", first_checks),
        summary("start to first output line seen by a check", outputs),
        summary("cancel_background (SIGTERM, exit, recorded)", cancels),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    django_on_scratch_db()
    print("\n".join(bench(args.runs)))


if __name__ == "__main__":
    main()
