"""Liveness leases (sandboxes/housekeeping/liveness.py) on the in-memory backend.

A process's death is its lease's expiry: a test moves a lease's expires_at into the past, as
a process that stopped renewing leaves it, and calls what a live process's heartbeat calls.
The heartbeat here runs without its thread (the test transaction is one connection's); the
real thing, a uvicorn killed with SIGKILL, is tests/platform/test_lease_kill.py.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ
from django_q.tasks import async_task

from sandboxes import services
from sandboxes.contract.errors import Conflict
from sandboxes.housekeeping import liveness, sweep
from sandboxes.models import CommandExecution, LeaseEnd, ProcessKind, ProcessLease


@pytest.fixture
def fake_sandbox(fake_backend, as_alice):
    return services.create_sandbox(as_alice).id


@pytest.fixture
def heartbeat(db, monkeypatch):
    """This process's heartbeat with its lease taken, its thread not started."""
    beat = liveness.Heartbeat(ProcessKind.WEB)
    beat.renewed_at = time.monotonic()
    beat.lease_id = liveness.take(ProcessKind.WEB)
    monkeypatch.setattr(liveness, "_heartbeat", beat)
    return beat


def expire(lease_id: int) -> None:
    """What a process that stopped renewing leaves behind: its expiry in the past."""
    ProcessLease.objects.filter(pk=lease_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )


def running_row(sandbox_id: str, lease_id: int | None, **fields) -> CommandExecution:
    from sandboxes.models import Sandbox

    return CommandExecution.objects.create(
        sandbox=Sandbox.objects.get(public_id=sandbox_id),
        channel="api",
        command="sleep 600",
        timeout_seconds=900,
        status=fields.pop("status", "running"),
        started_at=timezone.now(),
        lease_id=lease_id,
        **fields,
    )


def test_a_command_row_carries_the_lease_of_the_process_recording_it(
    fake_sandbox, as_alice, heartbeat
):
    result = services.run_command(as_alice, fake_sandbox, "echo hi")
    row = CommandExecution.objects.get(pk=result.id)
    assert (row.status, row.lease_id) == ("succeeded", heartbeat.lease_id)
    lease = ProcessLease.objects.get(pk=heartbeat.lease_id)
    assert (lease.pid, lease.hostname, lease.kind) == (os.getpid(), socket.gethostname(), "web")
    assert lease.expires_at > lease.renewed_at and lease.ended_at is None


def test_an_expired_lease_has_its_running_rows_closed_at_once(fake_sandbox, heartbeat):
    dead = liveness.take(ProcessKind.WEB)
    foreground = running_row(fake_sandbox, dead)
    never_started = running_row(fake_sandbox, dead, status="queued", background=True)
    supervised = running_row(fake_sandbox, dead, background=True)  # workers watch those
    alive = running_row(fake_sandbox, heartbeat.lease_id)
    expire(dead)

    heartbeat.beat()  # any live process's heartbeat

    holder = f"pid {os.getpid()} on host {socket.gethostname()}"
    foreground.refresh_from_db()
    assert foreground.status == "error" and foreground.finished_at is not None
    stopped = f"the platform process running it stopped ({holder})"
    assert foreground.error_message.startswith(stopped)
    never_started.refresh_from_db()
    assert never_started.status == "error" and "before it started" in never_started.error_message
    assert CommandExecution.objects.get(pk=supervised.pk).status == "running"
    assert CommandExecution.objects.get(pk=alive.pk).status == "running"
    lease = ProcessLease.objects.get(pk=dead)
    assert lease.end == LeaseEnd.EXPIRED and lease.ended_at is not None
    assert ProcessLease.objects.get(pk=heartbeat.lease_id).ended_at is None


def test_two_processes_noticing_together_close_once(fake_sandbox, heartbeat, caplog):
    dead = liveness.take(ProcessKind.WEB)
    row = running_row(fake_sandbox, dead)
    expire(dead)
    assert liveness.close_expired() == 1
    first = CommandExecution.objects.get(pk=row.pk)
    ended = ProcessLease.objects.get(pk=dead).ended_at
    # The second one: its SELECT saw the lease open, its conditional UPDATE finds it ended.
    assert liveness.close_expired() == 0
    assert ProcessLease.objects.filter(pk=dead, ended_at__isnull=True, end="").update(end="x") == 0
    again = CommandExecution.objects.get(pk=row.pk)
    assert (again.finished_at, again.error_message) == (first.finished_at, first.error_message)
    assert ProcessLease.objects.get(pk=dead).ended_at == ended
    assert caplog.text.count("stopped renewing its lease") == 1


def test_a_live_lease_is_left_alone_and_renewal_moves_its_expiry(fake_sandbox, heartbeat):
    row = running_row(fake_sandbox, heartbeat.lease_id)
    before = ProcessLease.objects.get(pk=heartbeat.lease_id).expires_at
    heartbeat.beat()
    assert ProcessLease.objects.get(pk=heartbeat.lease_id).expires_at >= before
    assert CommandExecution.objects.get(pk=row.pk).status == "running"


def test_a_clean_exit_releases_the_lease_and_its_rows_are_not_closed_as_dead(fake_sandbox):
    beat = liveness.Heartbeat(ProcessKind.WEB)
    beat.lease_id = liveness.take(ProcessKind.WEB)
    row = running_row(fake_sandbox, beat.lease_id)
    beat.stop()  # no thread started: stop() still releases
    lease = ProcessLease.objects.get(pk=row.lease_id)
    assert lease.end == LeaseEnd.RELEASED and lease.ended_at is not None
    expire(lease.pk)
    assert liveness.close_expired() == 0
    assert CommandExecution.objects.get(pk=row.pk).status == "running"  # the sweep's, later


def test_a_paused_process_does_not_overwrite_its_closed_row(
    fake_sandbox, as_alice, heartbeat, fake_backend, monkeypatch, caplog
):
    """SIGSTOP past the lease: while paused, another process closes the row; the command's
    result then comes back and must not turn the closed row into a success."""
    original = fake_backend.exec

    def paused_past_expiry(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        expire(heartbeat.lease_id)
        liveness.close_expired()  # another process's heartbeat, meanwhile
        heartbeat.renewed_at -= 60  # our own last renewal, a minute ago by our clock
        return result

    monkeypatch.setattr(fake_backend, "exec", paused_past_expiry)
    with pytest.raises(Conflict, match="after its record had been closed"):
        services.run_command(as_alice, fake_sandbox, "echo late")
    row = CommandExecution.objects.get(command="echo late")
    assert row.status == "error" and "stopped" in row.error_message and row.exit_code is None
    old = heartbeat.lease_id
    heartbeat.beat()  # back: its renewal fails, so it takes a new lease
    assert heartbeat.lease_id != old and "was ended by another" in caplog.text
    assert ProcessLease.objects.get(pk=heartbeat.lease_id).ended_at is None


def test_a_row_written_under_an_already_ended_lease_is_closed_too(fake_sandbox, heartbeat):
    dead = liveness.take(ProcessKind.WEB)
    expire(dead)
    liveness.close_expired()
    late = running_row(fake_sandbox, dead)  # paused between reading its lease and the INSERT
    heartbeat.beat()
    assert CommandExecution.objects.get(pk=late.pk).status == "error"


def test_the_sweep_closes_rows_of_an_expired_lease_without_waiting_for_the_timeout(
    fake_sandbox,
):
    """Fails on the old code: there the row stayed running for its timeout plus 5 minutes."""
    dead = liveness.take(ProcessKind.WEB)
    row = running_row(fake_sandbox, dead)
    old = running_row(fake_sandbox, None)  # from before leases: the timeout rule still
    expire(dead)
    assert sweep.close_abandoned_commands(timezone.now()) == 1
    assert CommandExecution.objects.get(pk=row.pk).status == "error"
    assert CommandExecution.objects.get(pk=old.pk).status == "running"
    later = timezone.now() + timedelta(seconds=900) + sweep.ABANDONED_AFTER + timedelta(seconds=1)
    assert sweep.close_abandoned_commands(later) == 1
    assert CommandExecution.objects.get(pk=old.pk).status == "error"


def test_a_dead_workers_task_is_handed_back_to_the_queue_at_once(db):
    task_id = async_task("sandboxes.tasks.sweep", task_name="sweep")
    queued = OrmQ.objects.get()
    held = timezone.now() + timedelta(hours=1)  # delivered: locked until Q_CLUSTER's retry
    OrmQ.objects.filter(pk=queued.pk).update(lock=held)
    worker = liveness.take(ProcessKind.WORKER)
    ProcessLease.objects.filter(pk=worker).update(task_id=task_id, task_name="sweep")
    expire(worker)
    liveness.close_expired()
    assert OrmQ.objects.get(pk=queued.pk).lock <= timezone.now()  # the next poll takes it


def test_a_sandbox_left_mid_deletion_by_a_dead_sweeper_is_finished_before_its_expiry(
    fake_backend, as_alice
):
    """Fails on the old code: a sweep's claim (stopping) whose worker died stayed there until
    the sandbox's expiry plus 10 minutes, hours for one claimed for idleness."""
    from sandboxes.models import Sandbox

    claimed, requested = (services.create_sandbox(as_alice).id for _ in range(2))
    long_ago = timezone.now() - sweep.STUCK_AFTER_EXPIRY - timedelta(seconds=1)
    later = timezone.now() + timedelta(hours=5)
    Sandbox.objects.filter(public_id=claimed).update(
        status="stopping",
        status_message="auto-cleanup at 2026-01-01 00:00:00 UTC: idle for over 30 minutes",
        status_changed_at=long_ago,
        expires_at=later,
    )
    # A request's own deletion (not the sweep's claim) is left to the expiry rule.
    Sandbox.objects.filter(public_id=requested).update(
        status="stopping", status_changed_at=long_ago, expires_at=later
    )
    assert sweep.sweep().expired == [claimed]
    assert Sandbox.objects.get(public_id=claimed).status == "deleted"
    assert "left by a worker that died while stopping" in (
        Sandbox.objects.get(public_id=claimed).status_message
    )
    assert Sandbox.objects.get(public_id=requested).status == "stopping"


def test_a_paused_process_does_not_bring_a_closed_background_row_back_to_running(
    fake_sandbox, as_alice, heartbeat, fake_backend, monkeypatch
):
    original = fake_backend.start_background

    def paused_past_expiry(self, *args, **kwargs):
        job = original(self, *args, **kwargs)
        expire(heartbeat.lease_id)
        liveness.close_expired()  # another process's heartbeat: the row was never started
        return job

    monkeypatch.setattr(fake_backend, "start_background", paused_past_expiry)
    with pytest.raises(Conflict, match="recorded as abandoned while it started"):
        services.start_background(as_alice, fake_sandbox, "sleep 30")
    row = CommandExecution.objects.get(command="sleep 30")
    assert row.status == "error" and "before it started" in row.error_message
    (record,) = next(iter(fake_backend.sandboxes.values()))["jobs"].values()
    assert record["cancelled_after"] is not None  # the job in the sandbox went too


def test_a_started_job_whose_starter_died_before_queuing_its_supervisor_is_taken_at_once(
    fake_sandbox, heartbeat
):
    """Fails on the old code: the row of a web process killed between the job's start (row
    running) and queuing its first supervisor was taken only QUEUED_LEASE_SECONDS (120 s)
    after its start, so the job's end went unrecorded for minutes (seen in the scale-out
    test)."""
    from sandboxes import tasks

    dead = liveness.take(ProcessKind.WEB)
    orphan = running_row(fake_sandbox, dead, background=True, background_state={"job": {}})
    starting = running_row(  # a live process's start: its own supervisor is coming
        fake_sandbox, heartbeat.lease_id, background=True, background_state={"job": {}}
    )
    expire(dead)

    heartbeat.beat()  # any live process's heartbeat ends the lease and queues the recovery

    assert [q.func() for q in OrmQ.objects.all()] == ["sandboxes.tasks.recover_background"]
    assert tasks.recover_background()["requeued"] == [orphan.pk]
    supervisor = CommandExecution.objects.get(pk=orphan.pk).background_state["supervisor"]
    assert supervisor["token"] and "pid" not in supervisor  # queued, not yet held
    assert "supervisor" not in CommandExecution.objects.get(pk=starting.pk).background_state
