"""Background commands on the real Docker engine with a real `manage.py qcluster`
(tests/qcluster.py) supervising, on committed data (transactional tests): a command outlives
its request, cancel kills every process of it (a fork bomb too), a killed and restarted worker
still records the end, the runtime limit, and access. Helpers: tests/services/helpers.py."""

from __future__ import annotations

import os
import signal
import time

import docker
import pytest

from sandboxes import services
from sandboxes.contract.errors import NotFound, PermissionDenied
from sandboxes.models import CommandExecution, Sandbox
from tests.services.helpers import audit_actions, final_row, wait_for

# --- the real thing: Docker engine and a qcluster worker --------------------------------------


@pytest.fixture(scope="module")
def engine():
    client = docker.from_env()
    yield client
    client.close()


def processes(engine, sandbox_id: str) -> str:
    """`ps` inside the sandbox, straight through the engine (no service call, no audit row)."""
    container = engine.containers.get(f"sandhub-{sandbox_id}")
    return container.exec_run(["ps", "-eo", "pid,pgid,sid,args"], user="1000").output.decode()


@pytest.fixture
def sandbox(transactional_db, real_docker, as_alice, engine):
    info = services.create_sandbox(as_alice, memory_mb=256)
    yield info.id
    if Sandbox.objects.get(public_id=info.id).status != "deleted":
        services.delete_sandbox(as_alice, info.id)
    assert (
        engine.containers.list(all=True, filters={"label": f"org.sandhub.sandbox={info.id}"}) == []
    )


@pytest.mark.audit_views
@pytest.mark.docker
def test_background_command_outlives_its_request(sandbox, as_alice, engine, qcluster):
    script = "echo begin; for i in 1 2 3 4 5; do sleep 1; echo tick $i; done; echo oops >&2; exit 3"
    started = time.monotonic()
    result = services.start_background(as_alice, sandbox, script, max_runtime_seconds=60)
    assert time.monotonic() - started < 2
    assert (result.status, result.background) == ("running", True)

    check = services.check_background(as_alice, sandbox, result.id)
    assert check.running and check.status == "running" and check.exit_code is None
    assert check.log_path.startswith("/run/sandhub/jobs/")  # out of /workspace
    wait_for(lambda: "sleep 1" in processes(engine, sandbox), 5, "the job's processes")

    # The worker, not a check, records the end: nobody looks until the row has changed.
    row = final_row(result.id, 20)
    assert (row.status, row.exit_code) == ("failed", 3)
    assert row.stdout == "begin\ntick 1\ntick 2\ntick 3\ntick 4\ntick 5\noops\n"
    assert row.stdout_bytes == len(row.stdout) and not row.stdout_truncated
    assert 5 <= row.duration_seconds < 10
    assert row.background_state["supervisor"]["pid"] != os.getpid()

    done = services.check_background(as_alice, sandbox, result.id, tail_lines=2)
    assert (done.running, done.status, done.exit_code) == (False, "failed", 3)
    assert done.output == "tick 5\noops\n" and done.output_truncated
    assert "sleep 1" not in processes(engine, sandbox)
    # The whole log stays in the sandbox's workspace.
    log = services.read_file(as_alice, sandbox, done.log_path).content.decode()
    assert log == row.stdout
    assert audit_actions(sandbox) == [
        ("command.background.check", "ok"),
        ("command.background.check", "ok"),
        ("command.background.start", "ok"),
    ]
    assert CommandExecution.objects.filter(sandbox__public_id=sandbox).count() == 1


@pytest.mark.audit_views
@pytest.mark.docker
def test_cancel_kills_every_process_of_the_command(sandbox, as_alice, engine, qcluster):
    script = "sleep 301 & setsid sleep 302 & (trap '' TERM; sleep 303) & sleep 304"
    result = services.start_background(as_alice, sandbox, script)
    wait_for(lambda: "sleep 304" in processes(engine, sandbox), 5, "the job's processes")
    assert services.check_background(as_alice, sandbox, result.id).running

    cancelled = services.cancel_background(as_alice, sandbox, result.id)
    assert (cancelled.status, cancelled.running) == ("cancelled", False)
    assert "sleep 30" not in processes(engine, sandbox)
    time.sleep(1.5)  # the supervisor's next look changes nothing
    row = CommandExecution.objects.get(pk=result.id)
    assert row.status == "cancelled" and row.finished_at is not None
    assert services.cancel_background(as_alice, sandbox, result.id).status == "cancelled"
    assert audit_actions(sandbox) == [
        ("command.background.cancel", "ok"),
        ("command.background.cancel", "ok"),
        ("command.background.check", "ok"),
        ("command.background.start", "ok"),
    ]


@pytest.mark.docker
def test_cancel_stops_a_fork_bomb(sandbox, as_alice, engine):
    result = services.start_background(as_alice, sandbox, "f(){ f | f; }; f")
    time.sleep(1.5)  # long enough to use up the sandbox's pids limit
    cancelled = services.cancel_background(as_alice, sandbox, result.id)
    assert cancelled.status == "cancelled"
    left = processes(engine, sandbox).splitlines()[1:]
    # The sandbox agent, when on, is the platform's own long-lived process, not the job's.
    assert [
        line.split(None, 3)[3]
        for line in left
        if "ps -eo" not in line and "sandhub agent" not in line
    ] == [
        "/usr/bin/tini -- sleep infinity",
        "sleep infinity",
    ]


@pytest.mark.docker
@pytest.mark.parametrize("crash", ["whole cluster", "one worker"])
def test_worker_killed_and_restarted_still_records_the_end(
    crash,
    sandbox,
    as_alice,
    engine,
    qcluster,
):
    result = services.start_background(as_alice, sandbox, "sleep 4; echo finished; exit 7")
    lease = wait_for(
        lambda: CommandExecution.objects.get(pk=result.id).background_state.get("supervisor"),
        10,
        "a worker to supervise the command",
    )
    assert lease.get("pid")
    if crash == "whole cluster":
        qcluster.kill()  # SIGKILL to every process of the cluster, mid-supervision
    else:
        os.kill(lease["pid"], signal.SIGKILL)  # the cluster reincarnates the worker
    assert CommandExecution.objects.get(pk=result.id).status == "running"
    assert "sleep 4" in processes(engine, sandbox)  # the job does not depend on the worker

    if crash == "whole cluster":
        qcluster.start()
    row = final_row(result.id, 30)
    assert (row.status, row.exit_code, row.stdout) == ("failed", 7, "finished\n")
    assert row.background_state["supervisor"]["pid"] != lease["pid"]
    line = f"re-supervised: [{result.id}]"
    wait_for(lambda: line in qcluster.log_since_start(), 5, "the recovery's log line")


@pytest.mark.docker
def test_max_runtime_exceeded_is_timed_out_and_killed(sandbox, as_alice, engine, qcluster):
    script = "echo going; sleep 300 & setsid sleep 305 & sleep 306"
    result = services.start_background(as_alice, sandbox, script, max_runtime_seconds=2)
    row = final_row(result.id, 15)
    assert (row.status, row.exit_code, row.stdout) == ("timed_out", 124, "going\n")
    assert 2 <= row.duration_seconds < 6
    assert "maximum runtime of 2 s" in row.error_message
    assert "sleep 30" not in processes(engine, sandbox)


@pytest.mark.audit_views
@pytest.mark.docker
def test_access_on_the_real_engine(sandbox, as_alice, as_bob, as_victor, engine):
    result = services.start_background(as_alice, sandbox, "sleep 30")
    with pytest.raises(NotFound):
        services.check_background(as_bob, sandbox, result.id)
    with pytest.raises(NotFound):
        services.cancel_background(as_bob, sandbox, result.id)
    with pytest.raises(PermissionDenied):
        services.cancel_background(as_victor, sandbox, result.id)
    assert services.check_background(as_victor, sandbox, result.id).running
    assert "sleep 30" in processes(engine, sandbox)
    services.cancel_background(as_alice, sandbox, result.id)
    assert len(audit_actions(sandbox)) == 6
