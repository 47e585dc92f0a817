"""Background commands: start, check, cancel, supervision, recovery.

The services on the in-memory backend, with the supervisor called in this process;
test_background_docker.py runs them on the real Docker engine with a real `manage.py
qcluster` supervising. Helpers: tests/services/helpers.py.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import services, tasks
from sandboxes.contract.errors import InvalidInput, NotFound, PermissionDenied, QuotaExceeded
from sandboxes.housekeeping import leases
from sandboxes.models import CommandExecution, Sandbox
from sandboxes.services import jobs
from tests.services.helpers import audit_actions, queued_supervisors

# --- fast: the services on the in-memory backend ----------------------------------------------


@pytest.fixture
def fake_sandbox(fake_backend, as_alice):
    return services.create_sandbox(as_alice).id


@pytest.fixture
def fast_supervisor(monkeypatch):
    monkeypatch.setattr(tasks, "POLL_SECONDS", 0.01)


def test_start_returns_at_once_and_queues_its_supervisor(
    fake_sandbox, as_alice, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        result = services.start_background(as_alice, fake_sandbox, "sleep 30", env={"A": "1"})
    assert (result.status, result.background, result.exit_code) == ("running", True, None)
    row = CommandExecution.objects.get(pk=result.id)
    assert row.background and row.kind == "command" and row.started_at is not None
    assert row.timeout_seconds == 3600  # the platform's maximum by default
    job = row.background_state["job"]
    assert job["job_id"].startswith(f"{row.pk}-") and job["log"].endswith("/log")
    assert queued_supervisors() == [("sandboxes.tasks.supervise_background", (row.pk,))]
    assert audit_actions(fake_sandbox) == [("command.background.start", "ok")]


@pytest.mark.audit_views
def test_check_reads_live_then_records_the_end(fake_sandbox, as_alice, fake_backend):
    result = services.start_background(
        as_alice, fake_sandbox, "echo one; echo two; sleep 0.3; echo three; exit 4"
    )
    running = services.check_background(as_alice, fake_sandbox, result.id)
    assert running.running and running.status == "running" and running.exit_code is None
    assert running.output == "one\ntwo\n" and running.elapsed_seconds < 1
    Sandbox.objects.filter(public_id=fake_sandbox).update(
        last_activity_at=timezone.now() - timedelta(hours=1)
    )
    time.sleep(0.35)
    done = services.check_background(as_alice, fake_sandbox, result.id, tail_lines=2)
    assert (done.running, done.status, done.exit_code) == (False, "failed", 4)
    assert done.output == "two\nthree\n" and done.output_truncated and done.output_bytes == 14
    row = CommandExecution.objects.get(pk=result.id)
    assert (row.status, row.exit_code, row.stdout, row.stdout_bytes) == (
        "failed",
        4,
        "one\ntwo\nthree\n",
        14,
    )
    assert row.finished_at is not None and row.duration_seconds == pytest.approx(0.3)
    # Checking is activity: the sandbox is not idle while someone follows its job.
    activity = Sandbox.objects.get(public_id=fake_sandbox).last_activity_at
    assert timezone.now() - activity < timedelta(minutes=1)
    assert audit_actions(fake_sandbox) == [
        ("command.background.check", "ok"),
        ("command.background.check", "ok"),
        ("command.background.start", "ok"),
    ]


def test_supervisor_records_the_end(fake_sandbox, as_alice, fast_supervisor):
    result = services.start_background(as_alice, fake_sandbox, "sleep 0.2; echo done")
    assert tasks.supervise_background(result.id) == "over"
    row = CommandExecution.objects.get(pk=result.id)
    assert (row.status, row.exit_code, row.stdout) == ("succeeded", 0, "done\n")
    assert row.background_state["supervisor"]["pid"] == os.getpid()


def test_sandbox_timeout_is_recorded_as_timed_out(fake_sandbox, as_alice, fast_supervisor):
    result = services.start_background(
        as_alice, fake_sandbox, "echo start; sleep 60", max_runtime_seconds=0.2
    )
    tasks.supervise_background(result.id)
    row = CommandExecution.objects.get(pk=result.id)
    assert (row.status, row.exit_code, row.stdout) == ("timed_out", 124, "start\n")
    assert "maximum runtime of 0.2 s" in row.error_message


def test_supervisor_kills_a_job_the_sandbox_failed_to_stop(
    fake_sandbox, as_alice, fake_backend, fast_supervisor, monkeypatch
):
    monkeypatch.setattr(fake_backend, "enforce_job_timeouts", False)
    monkeypatch.setattr(jobs, "BACKGROUND_KILL_GRACE_SECONDS", 0.1)
    # The runtime counts from the job's start, so the clock starts before the call.
    started = time.monotonic()
    result = services.start_background(as_alice, fake_sandbox, "sleep 60", max_runtime_seconds=0.2)
    tasks.supervise_background(result.id)
    assert 0.3 <= time.monotonic() - started < 5
    row = CommandExecution.objects.get(pk=result.id)
    assert row.status == "timed_out" and row.exit_code == 143


def test_cancel_records_cancelled_once(fake_sandbox, as_alice):
    result = services.start_background(as_alice, fake_sandbox, "echo hi; sleep 60")
    cancelled = services.cancel_background(as_alice, fake_sandbox, result.id)
    assert (cancelled.status, cancelled.running, cancelled.output) == ("cancelled", False, "hi\n")
    again = services.cancel_background(as_alice, fake_sandbox, result.id)
    assert again.status == "cancelled"
    assert services.check_background(as_alice, fake_sandbox, result.id).status == "cancelled"
    # The supervisor finds nothing left to do.
    assert tasks.supervise_background(result.id) == "supervised elsewhere, or over"


def test_cancel_of_a_finished_command_keeps_its_result(fake_sandbox, as_alice):
    result = services.start_background(as_alice, fake_sandbox, "echo quick")
    outcome = services.cancel_background(as_alice, fake_sandbox, result.id)
    assert (outcome.status, outcome.exit_code, outcome.output) == ("succeeded", 0, "quick\n")


@pytest.mark.audit_views
def test_other_team_gets_not_found_and_viewer_is_refused(fake_sandbox, as_alice, as_bob, as_victor):
    result = services.start_background(as_alice, fake_sandbox, "sleep 60")
    calls = [
        lambda who: services.start_background(who, fake_sandbox, "true"),
        lambda who: services.check_background(who, fake_sandbox, result.id),
        lambda who: services.cancel_background(who, fake_sandbox, result.id),
    ]
    for call in calls:
        with pytest.raises(NotFound, match=f"sandbox {fake_sandbox} not found"):
            call(as_bob)
    with pytest.raises(PermissionDenied):
        services.start_background(as_victor, fake_sandbox, "true")
    with pytest.raises(PermissionDenied):
        services.cancel_background(as_victor, fake_sandbox, result.id)
    assert services.check_background(as_victor, fake_sandbox, result.id).running
    # A command id from elsewhere (or a foreground one) is not a background command here.
    foreground = services.run_command(as_alice, fake_sandbox, "echo hi")
    with pytest.raises(NotFound, match=f"background command {foreground.id} not found"):
        services.check_background(as_alice, fake_sandbox, foreground.id)
    assert CommandExecution.objects.filter(sandbox__public_id=fake_sandbox).count() == 2
    outcomes = [outcome for _, outcome in audit_actions(fake_sandbox)]
    assert sorted(outcomes) == ["forbidden"] * 2 + ["not_found"] * 4 + ["ok"] * 2


def test_inputs_and_limits(fake_sandbox, as_alice):
    with pytest.raises(InvalidInput, match="max_runtime_seconds must be between"):
        services.start_background(as_alice, fake_sandbox, "true", max_runtime_seconds=10**6)
    with pytest.raises(InvalidInput, match="command is empty"):
        services.start_background(as_alice, fake_sandbox, "  ")
    started = services.start_background(as_alice, fake_sandbox, "sleep 60")
    with pytest.raises(InvalidInput, match="tail_lines"):
        services.check_background(as_alice, fake_sandbox, started.id, tail_lines=-1)
    for _ in range(services.MAX_BACKGROUND_PER_SANDBOX - 1):
        services.start_background(as_alice, fake_sandbox, "sleep 60")
    with pytest.raises(QuotaExceeded, match="at most 10 background commands"):
        services.start_background(as_alice, fake_sandbox, "sleep 60")


def test_deleted_sandbox_ends_its_running_command(fake_sandbox, as_alice, fast_supervisor):
    result = services.start_background(as_alice, fake_sandbox, "sleep 60")
    services.delete_sandbox(as_alice, fake_sandbox)
    assert tasks.supervise_background(result.id) == "over"
    row = CommandExecution.objects.get(pk=result.id)
    assert row.status == "error" and "deleted" in row.error_message


def _lease(command_id: int, **lease) -> None:
    row = CommandExecution.objects.get(pk=command_id)
    row.background_state = {**row.background_state, "supervisor": lease}
    row.save(update_fields=["background_state"])


def test_recovery_requeues_only_commands_without_a_live_supervisor(fake_sandbox, as_alice):
    ids = [services.start_background(as_alice, fake_sandbox, "sleep 60").id for _ in range(5)]
    dead, expired, live, young, old = ids
    host = leases.socket.gethostname()
    _lease(dead, token="t1", until=time.time() + 60, host=host, pid=2**22 + 7, pstart="1")
    _lease(expired, token="t2", until=time.time() - 1, host="elsewhere", pid=1)
    _lease(
        live,
        token="t3",
        until=time.time() + 60,
        host=host,
        pid=os.getpid(),
        pstart=leases.process_start(os.getpid()),
    )
    # `young` has no lease yet: its first supervisor is still queued.
    CommandExecution.objects.filter(pk=old).update(started_at=timezone.now() - timedelta(hours=1))
    report = tasks.recover_background()
    assert sorted(report["requeued"]) == sorted([dead, expired, old])
    assert {args[0] for func, args in queued_supervisors()} == {dead, expired, old}
    # Requeued ones hold a "queued" lease now: a second recovery leaves them alone.
    assert tasks.recover_background() == {"requeued": []}


def test_a_second_supervisor_steps_back(fake_sandbox, as_alice, fast_supervisor):
    result = services.start_background(as_alice, fake_sandbox, "sleep 60")
    _lease(
        result.id,
        token="other",
        until=time.time() + 60,
        host=leases.socket.gethostname(),
        pid=os.getpid(),
        pstart=leases.process_start(os.getpid()),
    )
    assert tasks.supervise_background(result.id) == "supervised elsewhere, or over"
    assert CommandExecution.objects.get(pk=result.id).status == "running"


def test_supervisor_continues_in_slices(fake_sandbox, as_alice, fast_supervisor, monkeypatch):
    monkeypatch.setattr(tasks, "SLICE_SECONDS", 0.05)
    result = services.start_background(as_alice, fake_sandbox, "sleep 60")
    assert tasks.supervise_background(result.id, "tok") == "continued"
    assert ("sandboxes.tasks.supervise_background", (result.id, "tok")) in queued_supervisors()
    lease = CommandExecution.objects.get(pk=result.id).background_state["supervisor"]
    assert lease["token"] == "tok" and "pid" not in lease  # queued, for the continuation
    assert tasks.recover_background() == {"requeued": []}


def test_an_end_whose_output_cannot_be_read_yet_is_recorded_at_the_next_look(
    fake_sandbox, as_alice, fake_backend, monkeypatch
):
    """Fails on the old code: the supervisor saw the end (a look without the log's tail),
    the read of the output then failed (its host restarting, say) and the row was recorded
    succeeded with no output, for good (seen in the scale-out test)."""
    from django.conf import settings

    from hosts.backends.base import BackendError
    from tenants.principal import Principal

    result = services.start_background(as_alice, fake_sandbox, "sleep 0.1; echo done")
    time.sleep(0.15)
    original = fake_backend.poll_background
    looks: list[int] = []

    def output_unreadable(self, state, job, tail_bytes):
        looks.append(tail_bytes)
        if tail_bytes:
            raise BackendError("the docker engine of host local stopped answering")
        return original(self, state, job, tail_bytes)

    monkeypatch.setattr(fake_backend, "poll_background", output_unreadable)
    assert services.background_tick(Principal.system(), result.id) is False
    assert looks == [0, settings.SANDHUB_OUTPUT_CAP_BYTES]
    assert CommandExecution.objects.get(pk=result.id).status == "running"  # nothing lost

    monkeypatch.setattr(fake_backend, "poll_background", original)
    assert services.background_tick(Principal.system(), result.id) is True
    row = CommandExecution.objects.get(pk=result.id)
    assert (row.status, row.exit_code, row.stdout) == ("succeeded", 0, "done\n")
