"""Pause, resume and stop through the services on the in-memory backend (its `state` per
box, tests/fakes.py): the states and their rules, resuming on the way of a call, quotas by
state, the rule for running commands, races on one sandbox, audit. The same flows on the
real Docker engine: test_lifecycle_docker.py; on an isolated SSH sandbox:
tests/ssh/test_lifecycle.py."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import (
    BackendFailure,
    Conflict,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from sandboxes.contract.results import UploadFile
from sandboxes.housekeeping import reconcile
from sandboxes.models import CommandExecution, CommandStatus, Sandbox, SandboxStatus
from sandboxes.services import background
from sandboxes.services.commands import refuse_if_paused_meanwhile
from tenants.models import AuditLog, Channel
from tenants.principal import Principal

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox(fake_backend, as_alice):
    return services.create_sandbox(as_alice, name="work")


def status_of(sandbox_id: str) -> str:
    return Sandbox.objects.get(public_id=sandbox_id).status


def box_state(fake_backend) -> str:
    (box,) = fake_backend.sandboxes.values()
    return box.get("state", "running")


def actions(sandbox_id: str) -> list[tuple[str, str]]:
    rows = AuditLog.objects.filter(target_id=sandbox_id, action__startswith="sandbox.")
    return [(row.action, row.outcome) for row in rows.order_by("id")]


def foreground(sandbox_id: str, status: str = CommandStatus.RUNNING) -> CommandExecution:
    return CommandExecution.objects.create(
        sandbox=Sandbox.objects.get(public_id=sandbox_id),
        channel=Channel.WEB,
        command="sleep 100",
        status=status,
        started_at=timezone.now(),
    )


# --- the states --------------------------------------------------------------------------------


def test_pause_then_a_command_resumes_it_and_says_how_long(sandbox, as_alice, fake_backend):
    change = services.pause_sandbox(as_alice, sandbox.id)
    assert (change.changed, change.previous_status, change.sandbox.status) == (
        True,
        "running",
        "paused",
    )
    assert change.sandbox.paused_at is not None and change.seconds is not None
    assert box_state(fake_backend) == "paused"

    result = services.run_command(as_alice, sandbox.id, "echo back")
    assert result.stdout == "back\n" and result.resumed_seconds is not None
    assert status_of(sandbox.id) == "running" and box_state(fake_backend) == "running"
    # Running already: nothing resumed, and the result says so.
    assert services.run_command(as_alice, sandbox.id, "echo again").resumed_seconds is None

    resume_row = AuditLog.objects.get(action="sandbox.resume", target_id=sandbox.id)
    assert resume_row.details["from"] == "paused" and resume_row.details["for"] == "command.run"
    assert resume_row.actor.username == "alice"


def test_pause_and_stop_of_what_is_so_already_change_nothing(sandbox, as_alice, fake_backend):
    services.pause_sandbox(as_alice, sandbox.id)
    again = services.pause_sandbox(as_alice, sandbox.id)
    assert (again.changed, again.seconds) == (False, None)
    services.stop_sandbox(as_alice, sandbox.id)
    assert services.stop_sandbox(as_alice, sandbox.id).changed is False
    assert [op for op, _ in fake_backend.lifecycle_calls] == ["pause", "stop"]
    assert services.resume_sandbox(as_alice, sandbox.id).changed is True
    assert services.resume_sandbox(as_alice, sandbox.id).changed is False


def test_stop_ends_background_commands_and_a_file_call_starts_it_again(
    sandbox, as_alice, fake_backend
):
    job = services.start_background(as_alice, sandbox.id, "sleep 1000")
    change = services.stop_sandbox(as_alice, sandbox.id)
    assert change.sandbox.status == "stopped" and change.background_ended == [job.id]
    ended = CommandExecution.objects.get(pk=job.id)
    assert ended.status == CommandStatus.CANCELLED and "stop" in ended.error_message
    with pytest.raises(Conflict, match="nothing runs to pause"):
        services.pause_sandbox(as_alice, sandbox.id)

    written = services.write_file(as_alice, sandbox.id, "notes.txt", "kept")
    assert written.resumed_seconds is not None and status_of(sandbox.id) == "running"
    assert [op for op, _ in fake_backend.lifecycle_calls] == ["stop", "start"]
    listing = services.list_files(as_alice, sandbox.id)
    assert listing.resumed_seconds is None and [e.name for e in listing] == ["notes.txt"]


def test_a_stopped_sandbox_resumes_for_an_upload_and_for_a_read(sandbox, as_alice):
    services.stop_sandbox(as_alice, sandbox.id)
    uploaded = services.upload_files(as_alice, sandbox.id, [UploadFile("a.txt", b"x")])
    assert uploaded.resumed_seconds is not None
    services.pause_sandbox(as_alice, sandbox.id)
    read = services.read_file(as_alice, sandbox.id, "a.txt")
    assert read.content == b"x" and read.resumed_seconds is not None


# --- the rule for running commands ----------------------------------------------------------


def test_pause_and_stop_wait_for_a_foreground_command(sandbox, as_alice, fake_backend):
    running = foreground(sandbox.id)
    for service in (services.pause_sandbox, services.stop_sandbox):
        with pytest.raises(Conflict, match="a command is running .* wait for it to finish"):
            service(as_alice, sandbox.id)
    assert status_of(sandbox.id) == "running" and fake_backend.lifecycle_calls == []
    # A command being started (queued) holds them too; one that ended does not.
    running.status = CommandStatus.QUEUED
    running.save()
    with pytest.raises(Conflict):
        services.pause_sandbox(as_alice, sandbox.id)
    running.status = CommandStatus.SUCCEEDED
    running.save()
    assert services.pause_sandbox(as_alice, sandbox.id).sandbox.status == "paused"


def test_a_background_command_is_frozen_with_its_sandbox(sandbox, as_alice, fake_backend):
    job = services.start_background(as_alice, sandbox.id, "sleep 1000")
    services.pause_sandbox(as_alice, sandbox.id)
    # Told from the row: a look through the frozen agent would wait (the fake refuses it).
    check = services.check_background(as_alice, sandbox.id, job.id)
    assert check.running and "paused" in check.error_message
    assert status_of(sandbox.id) == "paused"
    # Its supervisor lets go while it is frozen, without recording an end.
    assert background.background_tick(Principal.system(), job.id) is True
    assert CommandExecution.objects.get(pk=job.id).status == CommandStatus.RUNNING


def test_a_job_paused_past_its_max_runtime_is_killed_as_the_sandbox_resumes(
    sandbox, as_alice, fake_backend, monkeypatch
):
    monkeypatch.setattr(fake_backend, "enforce_job_timeouts", False)
    job = services.start_background(as_alice, sandbox.id, "sleep 1000", max_runtime_seconds=60)
    services.pause_sandbox(as_alice, sandbox.id)
    CommandExecution.objects.filter(pk=job.id).update(
        started_at=timezone.now() - timedelta(seconds=120)
    )
    change = services.resume_sandbox(as_alice, sandbox.id)
    assert change.background_ended == [job.id]
    (box,) = fake_backend.sandboxes.values()
    (record,) = box["jobs"].values()
    assert record["cancelled_after"] is not None


def test_a_command_that_finds_its_sandbox_claimed_meanwhile_does_not_run(sandbox, as_alice):
    row = foreground(sandbox.id)
    Sandbox.objects.filter(public_id=sandbox.id).update(status=SandboxStatus.PAUSING)
    with pytest.raises(Conflict, match="being paused or stopped"):
        refuse_if_paused_meanwhile(row, Sandbox.objects.get(public_id=sandbox.id))
    row.refresh_from_db()
    assert row.status == CommandStatus.ERROR and "not run" in row.error_message


# --- quotas by state -------------------------------------------------------------------------


def test_quotas_count_paused_and_stopped_sandboxes_each_their_own_way(
    fake_backend, as_alice, team_a
):
    team_a.max_paused_sandboxes, team_a.max_stopped_sandboxes = 1, 1
    team_a.save()
    first, second, third = (services.create_sandbox(as_alice).id for _ in range(3))
    services.pause_sandbox(as_alice, first)
    with pytest.raises(QuotaExceeded, match="at most 1 paused"):
        services.pause_sandbox(as_alice, second)
    services.stop_sandbox(as_alice, second)
    with pytest.raises(QuotaExceeded, match="at most 1 stopped"):
        services.stop_sandbox(as_alice, third)
    assert [status_of(i) for i in (first, second, third)] == ["paused", "stopped", "running"]
    # A paused or stopped sandbox holds no CPU: another one can be created in its place.
    services.create_sandbox(as_alice)


def test_paused_memory_is_counted_against_the_team_total(fake_backend, as_alice, team_a):
    team_a.max_paused_memory_mb = 600
    team_a.save()
    first = services.create_sandbox(as_alice, memory_mb=512).id
    second = services.create_sandbox(as_alice, memory_mb=256).id
    services.pause_sandbox(as_alice, first)
    with pytest.raises(QuotaExceeded, match="at most 600 MB"):
        services.pause_sandbox(as_alice, second)
    assert status_of(second) == "running"


def test_resume_over_the_running_quota_is_refused_and_changes_nothing(
    fake_backend, as_alice, team_a
):
    team_a.max_running_sandboxes = 1
    team_a.save()
    paused = services.create_sandbox(as_alice).id
    services.pause_sandbox(as_alice, paused)
    services.create_sandbox(as_alice)
    calls = list(fake_backend.lifecycle_calls)
    with pytest.raises(QuotaExceeded, match="at most 1 running sandboxes"):
        services.resume_sandbox(as_alice, paused)
    with pytest.raises(QuotaExceeded):
        services.run_command(as_alice, paused, "echo no room")  # resumes first: refused too
    assert status_of(paused) == "paused" and fake_backend.lifecycle_calls == calls
    assert CommandExecution.objects.filter(sandbox__public_id=paused).count() == 0


# --- bad input, access -----------------------------------------------------------------------


def test_resume_of_a_deleted_sandbox_is_refused_clearly(sandbox, as_alice, as_bob):
    services.delete_sandbox(as_alice, sandbox.id)
    with pytest.raises(Conflict, match="was deleted: a deleted sandbox cannot be resumed"):
        services.resume_sandbox(as_alice, sandbox.id)
    # Another team's deleted sandbox answers like a made-up id.
    with pytest.raises(NotFound) as theirs:
        services.resume_sandbox(as_bob, sandbox.id)
    with pytest.raises(NotFound) as made_up:
        services.resume_sandbox(as_bob, "sb_doesnotexist1")
    assert str(theirs.value).replace(sandbox.id, "X") == str(made_up.value).replace(
        "sb_doesnotexist1", "X"
    )


def test_error_and_lost_sandboxes_are_never_resumed(sandbox, as_alice, fake_backend):
    for status in (SandboxStatus.ERROR, SandboxStatus.LOST):
        Sandbox.objects.filter(public_id=sandbox.id).update(status=status)
        with pytest.raises(Conflict, match=f"it is {status}"):
            services.resume_sandbox(as_alice, sandbox.id)
        with pytest.raises(Conflict, match=f"{status}, not running"):
            services.run_command(as_alice, sandbox.id, "echo x")
    assert fake_backend.lifecycle_calls == []


def test_viewers_read_only_keys_and_other_teams_are_refused(
    sandbox, as_alice, as_victor, as_bob, alice, team_a
):
    read_only = Principal(user=alice, team=team_a, channel=Channel.API, scopes=frozenset({"read"}))
    for service in (services.pause_sandbox, services.resume_sandbox, services.stop_sandbox):
        with pytest.raises(PermissionDenied):
            service(as_victor, sandbox.id)
        with pytest.raises(PermissionDenied, match="no write scope"):
            service(read_only, sandbox.id)
        with pytest.raises(NotFound):
            service(as_bob, sandbox.id)
    assert status_of(sandbox.id) == "running"


def test_a_host_that_fails_leaves_the_row_as_the_host_says(sandbox, as_alice, fake_backend):
    fake_backend.fail_lifecycle = "the engine said no"
    with pytest.raises(BackendFailure, match="the engine said no"):
        services.pause_sandbox(as_alice, sandbox.id)
    sandbox_row = Sandbox.objects.get(public_id=sandbox.id)
    assert sandbox_row.status == "running" and "pause failed" in sandbox_row.status_message
    assert actions(sandbox.id)[-1] == ("sandbox.pause", "backend")


# --- races on one sandbox --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the pause runs in a thread of its own
def test_one_request_holds_a_sandbox_while_its_host_works(sandbox, as_alice, fake_backend):
    fake_backend.lifecycle_gate = threading.Event()
    outcome: dict[str, object] = {}

    def pause() -> None:
        try:
            outcome["pause"] = services.pause_sandbox(as_alice, sandbox.id).sandbox.status
        except Exception as exc:  # reported to the test below
            outcome["pause"] = exc

    worker = threading.Thread(target=pause)
    worker.start()
    try:
        assert fake_backend.lifecycle_held.wait(10), "the pause never reached its host"
        assert status_of(sandbox.id) == "pausing"
        for service, match in (
            (services.delete_sandbox, "pausing right now"),
            (services.stop_sandbox, "pausing right now"),
            (services.resume_sandbox, "pausing right now"),
        ):
            with pytest.raises(Conflict, match=match):
                service(as_alice, sandbox.id)
        with pytest.raises(Conflict, match="being paused right now"):
            services.run_command(as_alice, sandbox.id, "echo x")
    finally:
        fake_backend.lifecycle_gate.set()
        worker.join(30)
    assert outcome["pause"] == "paused" and status_of(sandbox.id) == "paused"
    assert [op for op, _ in fake_backend.lifecycle_calls] == ["pause"]


def test_a_delete_that_read_the_sandbox_before_a_pause_changes_nothing(sandbox, as_alice):
    stale = Sandbox.objects.get(public_id=sandbox.id)
    services.pause_sandbox(as_alice, sandbox.id)
    # The row as a slower delete read it: its claim is a compare-and-set, and it loses.
    won = stale.transition_if(SandboxStatus.STOPPING)
    assert won is False and status_of(sandbox.id) == "paused"
    services.delete_sandbox(as_alice, sandbox.id)
    assert status_of(sandbox.id) == "deleted"


# --- reconciliation --------------------------------------------------------------------------


def test_reconciliation_settles_a_stale_claim_and_finds_a_vanished_paused_sandbox(
    fake_backend, as_alice
):
    stuck, vanished, paused = (services.create_sandbox(as_alice).id for _ in range(3))
    services.pause_sandbox(as_alice, vanished)
    services.pause_sandbox(as_alice, paused)
    # A process that died between its claim and its settlement, long ago.
    long_ago = timezone.now() - timedelta(hours=1)
    Sandbox.objects.filter(public_id=stuck).update(status="pausing", status_changed_at=long_ago)
    Sandbox.objects.filter(public_id__in=[vanished, paused]).update(status_changed_at=long_ago)
    state = Sandbox.objects.get(public_id=vanished).backend_state
    fake_backend.sandboxes.pop(state["container_id"])

    report = reconcile.reconcile(grace=0)

    assert report.settled == [stuck] and report.lost == [vanished]
    assert [status_of(i) for i in (stuck, vanished, paused)] == ["running", "lost", "paused"]
    settled = AuditLog.objects.get(action="sandbox.settled", target_id=stuck)
    assert settled.details["status"] == "running"


def test_a_start_that_changes_the_hosts_state_is_kept_on_the_row(
    sandbox, as_alice, fake_backend, monkeypatch
):
    # A Docker container may come back from a stop with another address; the egress proxy
    # finds the sandbox by the address on its row, so the row must follow the host.
    real_start = fake_backend.start

    def start_elsewhere(backend, state):
        real_start(backend, state)
        state["egress_address"] = "172.30.0.9"

    monkeypatch.setattr(fake_backend, "start", start_elsewhere)
    services.stop_sandbox(as_alice, sandbox.id)
    services.resume_sandbox(as_alice, sandbox.id)
    row = Sandbox.objects.get(public_id=sandbox.id)
    assert row.status == SandboxStatus.RUNNING
    assert row.backend_state["egress_address"] == "172.30.0.9"
