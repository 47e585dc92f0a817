"""The multi-node layout on one machine under load and faults (issue 28), with a baseline of
the same run to compare with.

    DATABASE_URL=postgres://... .venv/bin/python bench/bench_scaleout.py \
        [--seconds 60] [--clients 20] [--baseline-seconds 20] [--exec-runs 50]

The harness of tests/cluster/ (the `scaleout` test), longer and printing figures: PostgreSQL
(a throwaway `test_<name>` database next to DATABASE_URL's, dropped at the end), two web
processes as scripts/web.sh starts them, two qcluster workers, the local Docker engine and a
second dockerd over TCP with TLS, an SSH host (sshd on loopback, per-sandbox Unix users),
three teams each with its own host. In order:

1. baseline: the same clients against ONE web process, no faults (--baseline-seconds);
2. the load: the clients over both web processes for --seconds, with kill -9 of a web process
   and of a worker, a restart of the second dockerd and the SSH connections cut;
3. raw: `docker exec echo` straight on a sandbox's container of the local engine, one after
   another (--exec-runs): what a command costs with no platform at all.

Then the checks of the test (history rows final, clients recovered, jobs ended, placement,
nothing left behind) as PASS/FAIL lines, and the ratios. Needs root and PostgreSQL. Compare
the ratios of one run, not figures between days.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _setup import ROOT, bench_instance


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--baseline-seconds", type=float, default=20.0)
    parser.add_argument("--exec-runs", type=int, default=50)
    return parser.parse_args()


@contextlib.contextmanager
def test_database() -> Iterator[None]:
    """Django on a fresh `test_<name>` database beside DATABASE_URL's (PostgreSQL only)."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("bench_scaleout needs PostgreSQL: set DATABASE_URL=postgres://...")
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    import django
    from django.test.utils import setup_databases, teardown_databases

    django.setup()
    created = setup_databases(verbosity=0, interactive=False, aliases={"default"})
    try:
        yield
    finally:
        from django.db import connections

        connections.close_all()
        teardown_databases(created, verbosity=0)


@contextlib.contextmanager
def machinery(scratch: Path) -> Iterator[tuple[Any, Any, Path]]:
    """The SSH test host (two login users) and the second dockerd; removed after."""
    from tests.cluster.dockerd2 import SecondEngine
    from tests.leftovers import remove_sandboxes_under
    from tests.ssh.logins import ProvisionSshd, set_up_users
    from tests.ssh.sshd import ensure_test_user

    ensure_test_user()
    set_up_users()
    sshd = ProvisionSshd().start()
    ssh_dir = Path(tempfile.mkdtemp(prefix="sandhub-scaleout-", dir="/var/tmp"))
    ssh_dir.chmod(0o777)
    engine = None
    try:
        engine = SecondEngine.start(scratch / "dockerd2", name="dockerd-scaleout")
        yield sshd, engine, ssh_dir / "base"
    finally:
        if engine is not None:
            engine.stop()
        sshd.close()
        remove_sandboxes_under(ssh_dir)
        shutil.rmtree(ssh_dir, ignore_errors=True)


def docker_exec_ms(sandbox_id: str, runs: int) -> dict[str, float]:
    """`echo hi` by docker exec on the sandbox's container, no platform in between."""
    import docker

    client = docker.from_env()
    try:
        container = client.containers.get(f"sandhub-{sandbox_id}")
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            code, _out = container.exec_run(["echo", "hi"])
            times.append(time.perf_counter() - started)
            assert code == 0, code
    finally:
        client.close()
    return {"n": runs, "p50": round(statistics.median(times) * 1000, 1)}


def verdicts(result: Any, layout: Any) -> dict[str, str]:
    from tests.cluster import checks
    from tests.cluster.scenario import placed_on

    steps: dict[str, Callable[[], None]] = {
        "history rows final 30 s after the load": lambda: checks.check_history_final(result),
        "clients: at most one failed call per fault": lambda: checks.check_clients_recovered(
            result
        ),
        "background jobs ended with output or error": lambda: checks.check_jobs_ended(result),
        "sandboxes on both engines and the SSH host": lambda: checks.check_placement(
            result, placed_on(result), layout
        ),
    }
    found = {}
    for name, step in steps.items():
        try:
            step()
            found[name] = "PASS"
        except AssertionError as exc:
            found[name] = f"FAIL: {str(exc)[:300]}"
    return found


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def main() -> None:
    args = parse()
    bench_instance()
    scratch = Path(tempfile.mkdtemp(prefix="sandhub-bench-scaleout-"))
    try:
        with test_database(), machinery(scratch) as (sshd, engine, ssh_base):
            report = measure(args, scratch, sshd, engine, ssh_base)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(report, indent=2))


def measure(args: argparse.Namespace, scratch: Path, sshd: Any, engine: Any, base: Path) -> Any:
    from tests.cluster import checks
    from tests.cluster.engines import remote_engine
    from tests.cluster.layout import running_layout
    from tests.cluster.scenario import LoadConfig, delete_sandboxes, run_load

    with running_layout(scratch, remote_engine(engine), sshd, base) as layout:
        config = LoadConfig(args.baseline_seconds, args.clients, webs=[0], faults=False)
        baseline = run_load(layout, config)
        print("baseline (one web process, no faults) done", file=sys.stderr)
        loaded = run_load(layout, LoadConfig(args.seconds, args.clients))
        print("load with faults done", file=sys.stderr)
        local = next(s for s, where in baseline.sandboxes.items() if where == "engine1")
        raw = docker_exec_ms(local, args.exec_runs)
        found = verdicts(loaded, layout)
        problems = delete_sandboxes(layout, {**baseline.sandboxes, **loaded.sandboxes})
        left = checks.leftovers(layout, set(baseline.sandboxes) | set(loaded.sandboxes))
        found["nothing left after delete and reconcile"] = (
            "PASS" if not left and not problems else f"FAIL: {(problems + left)[:10]}"
        )
    base_figures, load_figures = checks.figures(baseline), checks.figures(loaded)
    return {
        "load": load_figures,
        "baseline_one_web_no_faults": base_figures,
        "docker_exec_echo_ms": raw,
        "ratios": {
            "calls_per_second_load_over_baseline": ratio(
                load_figures["calls_per_second"], base_figures["calls_per_second"]
            ),
            "echo_p50_load_over_baseline": ratio(
                load_figures["echo_ms"].get("p50", 0), base_figures["echo_ms"].get("p50", 0)
            ),
            "echo_p50_baseline_over_docker_exec": ratio(
                base_figures["echo_ms"].get("p50", 0), raw["p50"]
            ),
        },
        "checks": found,
    }


if __name__ == "__main__":
    main()
