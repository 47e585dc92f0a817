"""Usage metrics through the services, on the in-memory backend (tests/fake_usage.py): the
sampling round (CPU % from two samples, bounded, a broken or stuck sandbox left out, prune),
get_sandbox_metrics (viewers may read, another team's is not found, live), host samples from
the probes and get_host_metrics. The real cgroups: tests/docker/test_usage.py, tests/ssh/."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NotFound, PermissionDenied
from sandboxes.housekeeping import probes, usage
from sandboxes.models import HostUsageSample, Sandbox, SandboxStatus, UsageSample
from tenants.models import AuditLog
from tenants.principal import Principal
from tests.fake_usage import MIB, FakeUsage

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake(fake_backend):
    FakeUsage.usage_broken, FakeUsage.usage_gate = set(), {}
    yield fake_backend
    for gate in FakeUsage.usage_gate.values():
        gate.set()


@pytest.fixture
def sandbox(fake, as_alice) -> str:
    return services.create_sandbox(as_alice, name="work").id


def container_of(sandbox_id: str) -> str:
    return Sandbox.objects.get(public_id=sandbox_id).backend_state["container_id"]


def test_a_round_samples_running_sandboxes_and_cpu_percent_needs_two(sandbox: str) -> None:
    first = usage.sample_round()
    assert first.sampled == 1 and not first.failed
    second = usage.sample_round()
    assert second.sampled == 1
    rows = list(UsageSample.objects.filter(sandbox__public_id=sandbox).order_by("at"))
    assert len(rows) == 2
    assert rows[0].cpu_percent is None  # nothing to compare with yet
    assert rows[1].cpu_percent is not None and rows[1].cpu_percent > 0
    assert rows[1].memory_bytes == 10 * MIB and rows[1].pids == 3


def test_cpu_percent_is_of_the_limit_over_the_interval() -> None:
    at = timezone.now()
    before = UsageSample(at=at - timedelta(seconds=60), cpu_seconds=10.0)
    assert usage.cpu_percent(before, at, 40.0, 1.0) == 50.0
    assert usage.cpu_percent(before, at, 40.0, 0.5) == 100.0
    assert usage.cpu_percent(before, at, 5.0, 1.0) is None  # a restart reset the counter
    assert usage.cpu_percent(None, at, 5.0, 1.0) is None


def test_paused_sandboxes_are_not_sampled(sandbox: str, as_alice: Principal) -> None:
    services.pause_sandbox(as_alice, sandbox)
    assert usage.sample_round().sampled == 0


def test_a_broken_sandbox_does_not_stop_the_round(fake, as_alice: Principal) -> None:
    broken = services.create_sandbox(as_alice, name="broken").id
    fine = services.create_sandbox(as_alice, name="fine").id
    FakeUsage.usage_broken.add(container_of(broken))
    report = usage.sample_round()
    assert report.failed == [broken] and report.sampled == 1
    assert UsageSample.objects.filter(sandbox__public_id=fine).count() == 1


def test_a_stuck_sandbox_is_left_out_when_the_round_time_is_up(
    fake, as_alice: Principal, settings
) -> None:
    settings.SANDHUB_USAGE_ROUND_SECONDS = 1
    stuck = services.create_sandbox(as_alice, name="stuck").id
    fine = services.create_sandbox(as_alice, name="fine").id
    gate = FakeUsage.usage_gate[container_of(stuck)] = threading.Event()
    try:
        report = usage.sample_round()
    finally:
        gate.set()
    assert report.timed_out == [stuck] and report.sampled == 1
    assert report.seconds < 10
    assert UsageSample.objects.filter(sandbox__public_id=fine).exists()


def test_old_samples_are_pruned(sandbox: str, settings) -> None:
    settings.SANDHUB_USAGE_KEEP_HOURS = 24
    row = Sandbox.objects.get(public_id=sandbox)
    UsageSample.objects.create(sandbox=row, at=timezone.now() - timedelta(hours=25))
    UsageSample.objects.create(sandbox=row, at=timezone.now() - timedelta(hours=23))
    report = usage.sample_round()
    assert report.pruned == 1
    assert UsageSample.objects.filter(sandbox=row).count() == 2


def test_the_task_entry_point_runs_a_round_as_the_system(sandbox: str) -> None:
    from sandboxes import tasks

    assert tasks.sample_usage()["sampled"] == 1
    with pytest.raises(PermissionDenied):
        services.sample_all_usage(Principal(user=None, team=None))


def test_metrics_have_series_latest_and_limits(sandbox: str, as_alice: Principal) -> None:
    usage.sample_round()
    usage.sample_round()
    metrics = services.get_sandbox_metrics(as_alice, sandbox, minutes=10)
    assert len(metrics.series.at) == 2 and metrics.latest is not None
    assert metrics.latest.memory_bytes == 10 * MIB and metrics.series.pids == [3, 3]
    row = Sandbox.objects.get(public_id=sandbox)
    assert metrics.limits.memory_bytes == row.memory_mb * MIB
    assert metrics.limits.cpus == row.cpus and metrics.limits.pids == row.pids_limit
    assert not metrics.sampled_now


def test_viewers_may_read_metrics_and_live_samples_now(sandbox: str, as_victor: Principal) -> None:
    metrics = services.get_sandbox_metrics(as_victor, sandbox, live=True)
    assert metrics.sampled_now and metrics.latest is not None
    assert UsageSample.objects.filter(sandbox__public_id=sandbox).count() == 1


def test_another_teams_sandbox_is_not_found(sandbox: str, as_bob: Principal) -> None:
    with pytest.raises(NotFound) as caught:
        services.get_sandbox_metrics(as_bob, sandbox)
    with pytest.raises(NotFound) as missing:
        services.get_sandbox_metrics(as_bob, "sb_doesnotexist00")
    assert str(caught.value).replace(sandbox, "X") == str(missing.value).replace(
        "sb_doesnotexist00", "X"
    )


def test_live_on_a_paused_sandbox_does_not_wake_it(sandbox: str, as_alice: Principal) -> None:
    services.pause_sandbox(as_alice, sandbox)
    metrics = services.get_sandbox_metrics(as_alice, sandbox, live=True)
    assert not metrics.sampled_now and metrics.latest is None
    assert Sandbox.objects.get(public_id=sandbox).status == SandboxStatus.PAUSED


@pytest.mark.parametrize("minutes", [0, -5, 24 * 60 + 1, "10", 1.5, True])
def test_bad_minutes_are_refused(sandbox: str, as_alice: Principal, minutes: object) -> None:
    with pytest.raises(InvalidInput):
        services.get_sandbox_metrics(as_alice, sandbox, minutes=minutes)  # type: ignore[arg-type]


@pytest.mark.audit_views
def test_reading_metrics_is_audited_as_a_view(sandbox: str, as_alice: Principal) -> None:
    services.get_sandbox_metrics(as_alice, sandbox)
    assert AuditLog.objects.filter(action="sandbox.metrics", target_id=sandbox).exists()


def test_probes_record_host_samples_and_teams_see_no_other_teams_counts(
    sandbox: str, as_alice: Principal, docker_host: Host
) -> None:
    probes.probe_hosts([docker_host])
    assert HostUsageSample.objects.filter(host=docker_host).count() == 1
    metrics = services.get_host_metrics(as_alice, docker_host.name)
    assert len(metrics.series.at) == 1
    assert metrics.series.sandboxes_running is None  # every team's count: admins only
    admin = services.get_host_metrics(Principal.system(), docker_host.name)
    assert admin.series.sandboxes_running == [1]


def test_another_teams_private_host_is_not_found(as_bob: Principal, team_a, db) -> None:
    private = Host.objects.create(name="alphas", kind="docker", endpoint="unix:///x", team=team_a)
    with pytest.raises(NotFound):
        services.get_host_metrics(as_bob, private.name)
