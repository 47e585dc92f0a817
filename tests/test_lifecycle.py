"""Auto-cleanup, host probes, reconciliation and the schedules that run them.

On the in-memory backend (fast); test_lifecycle_docker.py does the same on the real Docker
engine and in a real qcluster worker.
Every test runs as its own Sandhub instance (SANDHUB_INSTANCE), so reconciliation here never
touches containers of other deployments or of other test runs on the same engine.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.models import Schedule

from hosts.backends import get_backend
from hosts.backends.base import LABEL_INSTANCE, SandboxSpec
from hosts.models import Host
from sandboxes import services, tasks
from sandboxes.contract.errors import NoCapacity, PermissionDenied
from sandboxes.housekeeping import schedules
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from tenants.models import AuditLog, Channel
from tenants.principal import Principal
from tests.fakes import FakeBackend

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"
SYSTEM = Principal.system()
LONG_AGO = timedelta(hours=5)


@pytest.fixture(autouse=True)
def own_instance(settings):
    settings.SANDHUB_INSTANCE = INSTANCE
    FakeBackend.down_hosts = set()
    FakeBackend.fail_claim = None
    yield
    FakeBackend.down_hosts = set()


def age(sandbox_id: str, **fields) -> None:
    Sandbox.objects.filter(public_id=sandbox_id).update(**fields)


def status_of(sandbox_id: str) -> str:
    return Sandbox.objects.get(public_id=sandbox_id).status


def audit_of(action: str) -> AuditLog:
    return AuditLog.objects.get(action=action)


# --- schedules -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_schedules_exist_after_migrate_and_are_created_once():
    names = {spec.name for spec in schedules.SCHEDULES}
    rows = Schedule.objects.filter(name__in=names)
    assert {r.name for r in rows} == names  # made by the migrate that built the test database
    for row in rows:
        assert callable(import_string(row.func))
        assert row.schedule_type == Schedule.MINUTES and row.repeats == -1
    assert {r.name: r.minutes for r in rows}["sandhub.sweep"] == 1
    # An admin's change survives; a deleted schedule comes back; nothing is duplicated.
    Schedule.objects.filter(name="sandhub.reconcile").update(minutes=15)
    Schedule.objects.filter(name="sandhub.sweep").delete()
    assert schedules.ensure_schedules() == ["sandhub.sweep"]
    assert schedules.ensure_schedules() == []
    assert Schedule.objects.filter(name__in=names).count() == len(names)
    assert Schedule.objects.get(name="sandhub.reconcile").minutes == 15


# --- auto-cleanup (in-memory backend) --------------------------------------------------------


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


def test_lifecycle_entry_points_are_for_the_system_and_platform_admins(as_alice):
    for call in (
        services.sweep_expired_and_idle,
        services.reconcile_hosts,
        services.probe_all_hosts,
        services.refill_warm_pools,
    ):
        with pytest.raises(PermissionDenied):
            call(as_alice)


# --- probes and reconciliation (in-memory backend) -------------------------------------------


def test_probes_store_figures_that_list_hosts_shows(fake_backend, as_alice):
    services.create_sandbox(as_alice)
    result = tasks.probe_hosts()
    assert result == {"local": {"healthy": True, "idle_score": 0.8}}
    [info] = services.list_hosts(as_alice)
    assert (info.healthy, info.cpu_percent, info.memory_percent, info.sandboxes_running) == (
        True,
        10.0,
        20.0,
        1,
    )
    assert info.last_probe_at is not None


def test_a_silent_host_is_marked_down_skipped_and_comes_back(fake_backend, as_alice, docker_host):
    FakeBackend.down_hosts.add("local")
    report = services.reconcile_hosts(SYSTEM)
    docker_host.refresh_from_db()
    assert report.down == ["local"]
    assert (docker_host.healthy, docker_host.idle_score) == (False, 0.0)
    assert "does not answer" in docker_host.last_error
    assert audit_of("host.down").channel == Channel.SYSTEM
    with pytest.raises(NoCapacity):
        services.create_sandbox(as_alice)

    FakeBackend.down_hosts.clear()
    services.probe_all_hosts(SYSTEM)
    docker_host.refresh_from_db()
    assert docker_host.healthy and docker_host.last_error == ""
    assert audit_of("host.up").target_id == str(docker_host.pk)
    assert services.create_sandbox(as_alice).status == "running"


def _fake_container(backend: FakeBackend, sandbox_id: str, instance: str, age_s: float) -> str:
    spec = SandboxSpec(sandbox_id, "img", 1.0, 256, 64, False, labels={LABEL_INSTANCE: instance})
    key = backend.provision(spec)["container_id"]
    backend.sandboxes[key]["created"] -= age_s
    return key


def test_reconcile_removes_old_orphans_of_this_instance_only(
    fake_backend, as_alice, docker_host, settings
):
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 60
    backend = get_backend(docker_host)
    live = services.create_sandbox(as_alice)
    for box in fake_backend.sandboxes.values():  # the live sandbox is old too
        box["created"] -= 3600
    old_orphan = _fake_container(backend, "sb_orphan00000", INSTANCE, 3600)
    young_orphan = _fake_container(backend, "sb_young000000", INSTANCE, 5)
    elsewhere = _fake_container(backend, "sb_elsewhere00", "another-deployment", 3600)

    report = services.reconcile_hosts(SYSTEM)

    assert report.removed == ["sb_orphan00000"] and report.lost == []
    assert old_orphan not in fake_backend.sandboxes
    assert {young_orphan, elsewhere} <= set(fake_backend.sandboxes)
    assert status_of(live.id) == "running"
    row = audit_of("reconcile.orphan_removed")
    assert (row.channel, row.target_id) == (Channel.SYSTEM, "sb_orphan00000")


def test_reconcile_marks_a_sandbox_whose_container_vanished_lost(fake_backend, as_alice, team_a):
    info = services.create_sandbox(as_alice)
    kept = services.create_sandbox(as_alice)
    fake_backend.sandboxes.pop(Sandbox.objects.get(public_id=info.id).backend_state["container_id"])

    assert services.reconcile_hosts(SYSTEM).lost == [info.id]
    assert status_of(info.id) == "lost" and status_of(kept.id) == "running"
    row = audit_of("sandbox.lost")
    assert (row.team, row.target_id, row.channel) == (team_a, info.id, Channel.SYSTEM)
    # A lost sandbox can still be deleted by its owner, and is no longer reported.
    services.delete_sandbox(as_alice, info.id)
    assert services.reconcile_hosts(SYSTEM).lost == []
