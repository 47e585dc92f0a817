"""Background jobs a hostile tenant leans on (issue 8, points 4, 5 and 8): the per-sandbox
limit under concurrent starts, a job log that would fill the disk, and a job that writes
garbage where the platform reads its exit code.

The limit test runs on the in-memory backend against the real test database (SQLite or
PostgreSQL, whichever the run uses: the lock must hold on both); the others on the real
Docker engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import docker
import pytest
from django.db import connections

from hosts.backends.docker.names import SANDBOX_USER
from sandboxes import services
from sandboxes.contract.errors import QuotaExceeded
from sandboxes.models import CommandExecution, Sandbox
from sandboxes.services.background import MAX_BACKGROUND_PER_SANDBOX
from tenants.principal import Principal

MIB = 1024 * 1024


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)
    return value


# --- the per-sandbox limit under concurrency ------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_parallel_starts_never_pass_the_per_sandbox_limit(fake_backend, as_alice):
    sandbox = services.create_sandbox(as_alice).id
    starts = 2 * MAX_BACKGROUND_PER_SANDBOX
    barrier = threading.Barrier(starts)
    outcomes: list[str] = []

    def start() -> None:
        try:
            barrier.wait(10)
            services.start_background(as_alice, sandbox, "sleep 60")
            outcomes.append("started")
        except QuotaExceeded:
            outcomes.append("refused")
        except Exception as exc:  # reported below, with what the others got
            outcomes.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=start) for _ in range(starts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert (
        sorted(outcomes)
        == ["refused"] * (starts - MAX_BACKGROUND_PER_SANDBOX)
        + ["started"] * MAX_BACKGROUND_PER_SANDBOX
    ), outcomes
    running = CommandExecution.objects.filter(sandbox__public_id=sandbox, status="running")
    assert running.count() == MAX_BACKGROUND_PER_SANDBOX


# --- on the real engine ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine():
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def sandbox(real_docker, as_alice, engine):
    info = services.create_sandbox(as_alice, memory_mb=256)
    yield info.id
    if Sandbox.objects.get(public_id=info.id).status != "deleted":
        services.delete_sandbox(as_alice, info.id)


def in_sandbox(engine, sandbox_id: str, script: str) -> str:
    """Run as the sandbox user straight through the engine (no service call, no audit row)."""
    container = engine.containers.get(f"sandhub-{sandbox_id}")
    return container.exec_run(["sh", "-c", script], user=SANDBOX_USER).output.decode()


def supervise(command_id: int, timeout: float) -> None:
    """What the worker does, in this process: look until nothing is left to supervise."""
    deadline = time.monotonic() + timeout
    while not services.background_tick(Principal.system(), command_id):
        assert time.monotonic() < deadline, f"command {command_id} still running"
        time.sleep(0.2)


@pytest.mark.docker
@pytest.mark.django_db
def test_a_job_log_is_capped_head_and_tail_with_its_true_size(sandbox, as_alice, engine, settings):
    settings.SANDHUB_JOB_LOG_KEEP_BYTES = MIB
    # 40 MiB of numbered lines: the first and the last are kept, the middle is not.
    pad = "x" * 31  # each line: 7 digits, a space, this and a newline: 40 bytes
    script = f"seq 1000001 2000000 | sed 's/$/ {pad}/'; echo done"
    result = services.start_background(as_alice, sandbox, script, max_runtime_seconds=120)
    supervise(result.id, 90)
    row = CommandExecution.objects.get(pk=result.id)
    assert (row.status, row.exit_code) == ("succeeded", 0), row.error_message
    total = 1_000_000 * 40 + len("done\n")
    assert row.stdout_bytes == total and row.stdout_truncated
    assert row.stdout.endswith(f"2000000 {pad}\ndone\n")
    check = services.check_background(as_alice, sandbox, result.id, tail_lines=1)
    assert check.output == "done\n" and check.output_bytes == total
    job_dir = row.background_state["job"]["dir"]
    found = in_sandbox(engine, sandbox, f"du -sk {job_dir} | cut -f1; head -c 8 {job_dir}/log")
    kib, head = found.split("\n", 1)
    assert int(kib) <= 3 * 1024 + 64, found  # the head and at most two parts of the tail
    assert head == "1000001 "


@pytest.mark.docker
@pytest.mark.django_db
def test_garbage_in_the_exit_file_is_an_error_not_a_crash(sandbox, as_alice):
    checked = services.start_background(as_alice, sandbox, "sleep 1")
    supervised = services.start_background(as_alice, sandbox, "sleep 1")
    dirs = [
        CommandExecution.objects.get(pk=r.id).background_state["job"]["dir"]
        for r in (checked, supervised)
    ]
    # Once the runners have written their exit files, the sandbox overwrites them.
    overwrite = "; ".join(f"printf '99999999999999999999999 1\\n' > {d}/exit" for d in dirs)
    services.run_command(as_alice, sandbox, f"sleep 2; {overwrite}", timeout=20)

    check = services.check_background(as_alice, sandbox, checked.id)
    assert (check.running, check.status, check.exit_code) == (False, "error", None)
    assert "exit file" in check.error_message, check.error_message
    supervise(supervised.id, 10)  # the supervisor's own look: no exception either
    row = CommandExecution.objects.get(pk=supervised.id)
    assert (row.status, row.exit_code) == ("error", None) and "exit file" in row.error_message
