"""The schedules that run the housekeeping (housekeeping/schedules.py, tasks.py): made once by
migrate, their entry points for the system and platform admins only, and the sweep schedule
end to end in a real qcluster worker. Fixtures: tests/services/housekeeping/conftest.py."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.models import Schedule, Success
from django_q.scheduler import scheduler

from sandboxes import services
from sandboxes.contract.errors import PermissionDenied
from sandboxes.housekeeping import schedules
from tenants.models import Channel
from tests.services.housekeeping.helpers import age, audit_of, engine_has, status_of


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


def test_lifecycle_entry_points_are_for_the_system_and_platform_admins(as_alice):
    for call in (
        services.sweep_expired_and_idle,
        services.reconcile_hosts,
        services.probe_all_hosts,
        services.refill_warm_pools,
    ):
        with pytest.raises(PermissionDenied):
            call(as_alice)


# --- the schedule, end to end, in a real qcluster worker -------------------------------------


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_real_qcluster_runs_the_sweep_schedule(real_docker, as_alice, engine, qcluster):
    """Schedule row -> django-q2 scheduler -> queued task -> worker process -> sweep.

    The cluster's own scheduler first looks 30 s after it starts; the test calls the same
    scheduler function once instead of waiting for it.
    """
    info = services.create_sandbox(as_alice, memory_mb=128)
    age(info.id, expires_at=timezone.now() - timedelta(seconds=1))
    Schedule.objects.filter(name="sandhub.sweep").update(
        next_run=timezone.now() - timedelta(seconds=1)
    )
    scheduler()

    # The worker deletes; then the cluster's monitor stores the task's result.
    done = Success.objects.filter(func="sandboxes.tasks.sweep")
    deadline = time.monotonic() + 20
    while not done.exists():
        assert time.monotonic() < deadline, qcluster.log_since_start()
        time.sleep(0.2)
    assert done.get().result["expired"] == [info.id]
    assert status_of(info.id) == "deleted"
    assert engine_has(engine, info.id) == (False, False)
    row = audit_of("sandbox.expire")
    assert (row.channel, row.target_id, row.outcome) == (Channel.SYSTEM, info.id, "ok")
    assert Schedule.objects.get(name="sandhub.sweep").next_run > timezone.now()
