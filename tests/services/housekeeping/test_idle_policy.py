"""The sweep under a team's pause policy (sandboxes/housekeeping/idlepolicy.py): idle and
expired sandboxes paused (else stopped, else deleted), paused ones stopped and stopped ones
deleted on the team's clocks, a fresh lifetime on resume; the delete policy as before, with
paused and stopped sandboxes never idle. On the in-memory backend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import services
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from tenants.models import AuditLog, Channel, IdleAction
from tests.services.housekeeping.helpers import LONG_AGO, SYSTEM, age, status_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def pausing_team(team_a):
    team_a.idle_action = IdleAction.PAUSE
    team_a.save()
    return team_a


def actions_of(sandbox_id: str) -> list[str]:
    rows = AuditLog.objects.filter(target_id=sandbox_id, channel=Channel.SYSTEM).order_by("id")
    return [row.action for row in rows]


def test_an_idle_sandbox_is_paused_not_deleted_and_a_busy_one_kept(
    fake_backend, as_alice, pausing_team
):
    idle, busy = (services.create_sandbox(as_alice).id for _ in range(2))
    for sandbox_id in (idle, busy):
        age(sandbox_id, last_activity_at=timezone.now() - LONG_AGO)
    CommandExecution.objects.create(
        sandbox=Sandbox.objects.get(public_id=busy),
        channel="web",
        command="sleep 100000",
        background=True,
        status=CommandStatus.RUNNING,
    )

    report = services.sweep_expired_and_idle(SYSTEM)

    assert report.paused == [idle] and report.idle == [] and report.failed == {}
    assert (status_of(idle), status_of(busy)) == ("paused", "running")
    assert actions_of(idle) == ["sandbox.idle.pause"]
    # Paused: never idle again, whatever its last activity says.
    assert services.sweep_expired_and_idle(SYSTEM).paused == []


def test_an_expired_sandbox_is_paused_and_its_resume_gives_a_fresh_lifetime(
    fake_backend, as_alice, pausing_team
):
    sandbox_id = services.create_sandbox(as_alice, lifetime_minutes=30).id
    long_ago = timezone.now() - timedelta(days=3)
    age(sandbox_id, created_at=long_ago, expires_at=long_ago + timedelta(minutes=30))

    assert services.sweep_expired_and_idle(SYSTEM).paused == [sandbox_id]
    assert actions_of(sandbox_id) == ["sandbox.expire.pause"]
    # Its lifetime does not end it while paused: its own clocks do.
    assert services.sweep_expired_and_idle(SYSTEM).expired == []

    services.run_command(as_alice, sandbox_id, "echo awake")
    row = Sandbox.objects.get(public_id=sandbox_id)
    assert row.status == "running" and row.lifetime_minutes == 30
    assert row.expires_at - row.lifetime_started_at == timedelta(minutes=30)
    assert row.expires_at > timezone.now()
    # Its extensions count from the fresh start, not from its creation days ago.
    assert services.extend_sandbox(as_alice, sandbox_id, 60).expires_at > row.expires_at


def test_no_room_among_paused_stops_and_no_room_anywhere_deletes(
    fake_backend, as_alice, pausing_team
):
    pausing_team.max_paused_sandboxes = 0
    pausing_team.save()
    stopped = services.create_sandbox(as_alice).id
    age(stopped, last_activity_at=timezone.now() - LONG_AGO)
    assert services.sweep_expired_and_idle(SYSTEM).stopped == [stopped]
    assert actions_of(stopped) == ["sandbox.idle.stop"]

    pausing_team.max_stopped_sandboxes = 1
    pausing_team.save()
    deleted = services.create_sandbox(as_alice).id
    age(deleted, last_activity_at=timezone.now() - LONG_AGO)
    report = services.sweep_expired_and_idle(SYSTEM)
    assert report.idle == [deleted] and status_of(deleted) == "deleted"
    row = AuditLog.objects.get(action="sandbox.idle", target_id=deleted)
    assert "no room among the team's paused or stopped" in row.details["reason"]


def test_paused_too_long_is_stopped_and_stopped_too_long_deleted(fake_backend, as_alice, team_a):
    # Any team's clocks, whatever its idle policy (these were paused and stopped by hand).
    team_a.stop_paused_after_hours, team_a.delete_stopped_after_days = 2, 3
    team_a.save()
    paused, fresh, stopped = (services.create_sandbox(as_alice).id for _ in range(3))
    for sandbox_id in (paused, fresh):
        services.pause_sandbox(as_alice, sandbox_id)
    services.stop_sandbox(as_alice, stopped)
    age(paused, status_changed_at=timezone.now() - timedelta(hours=3))
    age(stopped, status_changed_at=timezone.now() - timedelta(days=4))

    report = services.sweep_expired_and_idle(SYSTEM)

    assert report.stopped == [paused] and report.deleted == [stopped]
    assert [status_of(i) for i in (paused, fresh, stopped)] == ["stopped", "paused", "deleted"]
    assert actions_of(paused) == ["sandbox.paused.stop"]
    assert actions_of(stopped) == ["sandbox.stopped.delete"]


def test_the_delete_policy_deletes_expired_paused_sandboxes_as_before(
    fake_backend, as_alice, team_a
):
    sandbox_id = services.create_sandbox(as_alice).id
    services.pause_sandbox(as_alice, sandbox_id)
    age(sandbox_id, last_activity_at=timezone.now() - LONG_AGO)
    assert services.sweep_expired_and_idle(SYSTEM).idle == []  # paused: not idle
    age(sandbox_id, expires_at=timezone.now() - timedelta(seconds=1))
    assert services.sweep_expired_and_idle(SYSTEM).expired == [sandbox_id]
    assert status_of(sandbox_id) == "deleted" and fake_backend.sandboxes == {}
