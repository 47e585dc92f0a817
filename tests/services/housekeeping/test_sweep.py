"""Auto-cleanup (sandboxes/housekeeping/sweep.py): expired and idle sandboxes deleted as the
system, busy and recent ones kept, sandboxes stuck mid-creation or mid-deletion finished,
failed deletions retried; on the in-memory backend, then on the real Docker engine.
Fixtures: tests/services/housekeeping/conftest.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from hosts.models import Host
from sandboxes import services, tasks
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from tenants.models import AuditLog, Channel
from tests.fakes import FakeBackend
from tests.services.housekeeping.helpers import (
    LONG_AGO,
    SYSTEM,
    age,
    audit_of,
    engine_has,
    status_of,
)

# --- in-memory backend -----------------------------------------------------------------------


def test_sweep_deletes_an_expired_sandbox_as_the_system(fake_backend, as_alice, team_a):
    info = services.create_sandbox(as_alice)
    age(info.id, expires_at=timezone.now() - timedelta(seconds=1))

    report = services.sweep_expired_and_idle(SYSTEM)

    assert report.expired == [info.id] and report.idle == [] and report.failed == {}
    assert status_of(info.id) == "deleted" and fake_backend.sandboxes == {}
    row = audit_of("sandbox.expire")
    assert (row.channel, row.actor, row.team, row.target_id, row.outcome) == (
        Channel.SYSTEM,
        None,
        team_a,
        info.id,
        "ok",
    )
    assert "expired" in row.details["reason"]


def test_sweep_deletes_idle_sandboxes_but_not_busy_or_recent_ones(fake_backend, as_alice, team_a):
    idle, busy, recent = (services.create_sandbox(as_alice).id for _ in range(3))
    for sandbox_id in (idle, busy):
        age(sandbox_id, last_activity_at=timezone.now() - LONG_AGO)
    CommandExecution.objects.create(
        sandbox=Sandbox.objects.get(public_id=busy),
        channel="web",
        command="sleep 100000",
        background=True,
        status=CommandStatus.RUNNING,
    )

    report = tasks.sweep()  # the task the schedule runs

    assert report["idle"] == [idle] and report["expired"] == []
    assert [status_of(i) for i in (idle, busy, recent)] == ["deleted", "running", "running"]
    assert audit_of("sandbox.idle").target_id == idle and len(fake_backend.sandboxes) == 2
    # The background command finishes: now the sandbox is idle like any other.
    CommandExecution.objects.update(status=CommandStatus.SUCCEEDED)
    assert services.sweep_expired_and_idle(SYSTEM).idle == [busy]


def test_abandoned_command_rows_stop_keeping_a_sandbox_busy(fake_backend, as_alice, team_a):
    """A web process killed mid-command, or a start that died before the job began."""
    sandbox_id = services.create_sandbox(as_alice).id
    age(sandbox_id, last_activity_at=timezone.now() - LONG_AGO)
    sandbox = Sandbox.objects.get(public_id=sandbox_id)
    long_ago = timezone.now() - timedelta(hours=2)
    rows = [
        CommandExecution.objects.create(
            sandbox=sandbox,
            channel="web",
            command="x",
            status=CommandStatus.RUNNING,
            timeout_seconds=60,
            started_at=long_ago,
        ),
        CommandExecution.objects.create(
            sandbox=sandbox,
            channel="mcp",
            command="y",
            background=True,
            status=CommandStatus.QUEUED,
        ),
        # Still within its own (long) timeout: left alone.
        CommandExecution.objects.create(
            sandbox=sandbox,
            channel="web",
            command="z",
            status=CommandStatus.RUNNING,
            timeout_seconds=3 * 3600,
            started_at=long_ago,
        ),
    ]
    CommandExecution.objects.filter(pk=rows[1].pk).update(created_at=long_ago)

    report = tasks.sweep()

    statuses = [CommandExecution.objects.get(pk=r.pk).status for r in rows]
    assert report["abandoned_commands"] == 2
    assert statuses == ["error", "error", "running"]
    assert status_of(sandbox_id) == "running"  # the long command still keeps it busy
    CommandExecution.objects.filter(pk=rows[2].pk).update(status=CommandStatus.SUCCEEDED)
    assert services.sweep_expired_and_idle(SYSTEM).idle == [sandbox_id]


def test_an_idle_timeout_of_zero_never_deletes(fake_backend, as_alice, team_a):
    team_a.idle_timeout_minutes = 0
    team_a.save()
    info = services.create_sandbox(as_alice)
    age(info.id, last_activity_at=timezone.now() - timedelta(days=30))
    assert services.sweep_expired_and_idle(SYSTEM).idle == []
    assert status_of(info.id) == "running"


def test_sweep_waits_for_an_unreachable_host_and_leaves_claimed_sandboxes(
    fake_backend, as_alice, docker_host
):
    waiting, deleting = (services.create_sandbox(as_alice).id for _ in range(2))
    age(waiting, expires_at=timezone.now() - timedelta(seconds=1))
    age(deleting, expires_at=timezone.now() - timedelta(seconds=1), status="stopping")
    Host.objects.filter(pk=docker_host.pk).update(healthy=False)
    assert services.sweep_expired_and_idle(SYSTEM).expired == []
    assert status_of(waiting) == "running"

    Host.objects.filter(pk=docker_host.pk).update(healthy=True)
    # The sandbox some other worker is deleting (stopping) is not the sweep's business.
    assert services.sweep_expired_and_idle(SYSTEM).expired == [waiting]
    assert status_of(deleting) == "stopping"


def test_sandboxes_stuck_mid_creation_or_deletion_are_finished_after_expiry(fake_backend, as_alice):
    """A process that died while creating or deleting leaves starting/stopping behind."""
    starting, stopping, recent = (services.create_sandbox(as_alice).id for _ in range(3))
    long_expired = timezone.now() - timedelta(hours=1)
    age(starting, status="starting", expires_at=long_expired)
    age(stopping, status="stopping", expires_at=long_expired)
    age(recent, status="stopping", expires_at=timezone.now() - timedelta(minutes=1))

    assert sorted(services.sweep_expired_and_idle(SYSTEM).expired) == sorted([starting, stopping])
    assert [status_of(i) for i in (starting, stopping, recent)] == [
        "deleted",
        "deleted",
        "stopping",
    ]
    assert len(fake_backend.sandboxes) == 1  # their containers are gone too
    assert services.sweep_expired_and_idle(SYSTEM).expired == []


def test_a_failed_deletion_is_left_in_error_and_retried(fake_backend, as_alice, monkeypatch):
    from hosts.backends.base import BackendError

    info = services.create_sandbox(as_alice)
    age(info.id, expires_at=timezone.now() - timedelta(seconds=1))

    def refuse(self, state):
        raise BackendError("engine said no")

    with monkeypatch.context() as patch:
        patch.setattr(FakeBackend, "destroy", refuse)
        report = services.sweep_expired_and_idle(SYSTEM)
    assert "engine said no" in report.failed[info.id] and status_of(info.id) == "error"
    assert audit_of("sandbox.expire").outcome == "backend"

    assert services.sweep_expired_and_idle(SYSTEM).expired == [info.id]
    assert status_of(info.id) == "deleted"


# --- on the real Docker engine ---------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db
def test_real_sweep_removes_expired_and_idle_sandboxes_and_keeps_busy_ones(
    real_docker, as_alice, engine
):
    expired, idle, busy = (services.create_sandbox(as_alice, memory_mb=128).id for _ in range(3))
    age(expired, expires_at=timezone.now() - timedelta(seconds=1))
    for sandbox_id in (idle, busy):
        age(sandbox_id, last_activity_at=timezone.now() - LONG_AGO)
    CommandExecution.objects.create(
        sandbox=Sandbox.objects.get(public_id=busy),
        channel="mcp",
        command="python3 train.py",
        background=True,
        status=CommandStatus.RUNNING,
    )

    report = services.sweep_expired_and_idle(SYSTEM)

    assert (report.expired, report.idle, report.failed) == ([expired], [idle], {})
    assert engine_has(engine, expired) == (False, False)
    assert engine_has(engine, idle) == (False, False)
    assert engine_has(engine, busy) == (True, True)
    assert {r.action for r in AuditLog.objects.filter(channel=Channel.SYSTEM)} == {
        "sandbox.expire",
        "sandbox.idle",
    }
    services.delete_sandbox(as_alice, busy)
    assert engine_has(engine, busy) == (False, False)
