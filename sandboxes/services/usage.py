"""Usage metrics: a sandbox's samples (the sampling task's, sandboxes/housekeeping/usage.py)
and a host's, for the charts and for agents (REST, MCP). Any member of the sandbox's team
may read them, viewers too; another team's sandbox is not found, as everywhere."""

from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from hosts.models import Host
from sandboxes.contract.errors import InvalidInput, NotFound
from sandboxes.contract.usage import (
    HostMetrics,
    HostSeries,
    SandboxMetrics,
    UsageLimits,
    UsageSeries,
    UsageValues,
)
from sandboxes.housekeeping import usage
from sandboxes.models import HostUsageSample, Sandbox, SandboxStatus, UsageSample
from sandboxes.policy import access, placement
from sandboxes.policy.access import READ
from sandboxes.services.common import backend_errors, backend_of
from sandboxes.services.hosts import _require_platform
from tenants.auditing import AUDIT_VIEW, audited, current
from tenants.principal import Principal

LIVE_MIN_GAP = timedelta(seconds=5)  # a live sample this soon after the last is not stored
MIB = 1 << 20


def check_minutes(minutes: object) -> int:
    most = settings.SANDHUB_USAGE_KEEP_HOURS * 60
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= most:
        raise InvalidInput(f"minutes must be a whole number from 1 to {most}; got {minutes!r}")
    return minutes


@audited("sandbox.metrics", "sandbox", kind=AUDIT_VIEW)
def get_sandbox_metrics(
    principal: Principal, sandbox_id: str, minutes: int = 60, live: bool = False
) -> SandboxMetrics:
    """The sandbox's usage over the last `minutes`; live: a sample is taken now first (of a
    running sandbox: a paused or stopped one is not woken for it)."""
    current().target("sandbox", sandbox_id)
    minutes = check_minutes(minutes)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "read the usage of")
    sampled_now = bool(live) and sandbox.status == SandboxStatus.RUNNING
    if sampled_now:
        take_sample(sandbox)
    since = timezone.now() - timedelta(minutes=minutes)
    rows = list(UsageSample.objects.filter(sandbox=sandbox, at__gte=since).order_by("at"))
    return SandboxMetrics(
        sandbox_id=sandbox.public_id,
        status=sandbox.status,
        minutes=minutes,
        interval_seconds=settings.SANDHUB_USAGE_SAMPLE_SECONDS,
        sampled_now=sampled_now,
        latest=UsageValues.read(rows[-1]) if rows else None,
        limits=limits_of(sandbox, rows[-1] if rows else None),
        series=UsageSeries(
            at=[r.at for r in rows],
            cpu_percent=[r.cpu_percent for r in rows],
            memory_bytes=[r.memory_bytes for r in rows],
            disk_used_bytes=[r.disk_used_bytes for r in rows],
            pids=[r.pids for r in rows],
        ),
    )


def take_sample(sandbox: Sandbox) -> None:
    """A sample now, through the backend, stored unless the last one is very recent."""
    backend = backend_of(sandbox)
    with backend_errors(sandbox, "read the usage"):
        reading = backend.sample_usage(sandbox.backend_state)
    before = usage.latest_samples([sandbox.pk]).get(sandbox.pk)
    row = usage.sample_row(sandbox, reading, before)
    if before is None or row.at - before.at >= LIVE_MIN_GAP:
        row.save()


def limits_of(sandbox: Sandbox, latest: UsageSample | None) -> UsageLimits:
    """The limits the sandbox reported, else the ones it was made with."""
    disk = sandbox.disk_mb * MIB if sandbox.disk_mb else None
    if latest is None:
        return UsageLimits(
            cpus=sandbox.cpus,
            memory_bytes=sandbox.memory_mb * MIB,
            disk_bytes=disk,
            pids=sandbox.pids_limit,
        )
    return UsageLimits(
        cpus=latest.cpu_limit if latest.cpu_limit is not None else sandbox.cpus,
        memory_bytes=latest.memory_limit_bytes or sandbox.memory_mb * MIB,
        disk_bytes=latest.disk_limit_bytes or disk,
        pids=latest.pids_limit or sandbox.pids_limit,
    )


@audited("host.metrics", "host", kind=AUDIT_VIEW)
def get_host_metrics(principal: Principal, host_name: str, minutes: int = 60) -> HostMetrics:
    """A host's load over the last `minutes`, for whoever may list it (list_hosts): every
    team's running sandboxes are counted for platform admins only."""
    current().target("host", host_name)
    minutes = check_minutes(minutes)
    access.require(principal, READ, "see hosts")
    admin = access.is_platform_admin(principal)
    visible = Host.objects.all() if admin else placement.visible_hosts(principal.team)
    host = visible.filter(name=host_name).first()
    if host is None:
        raise NotFound(f"host {host_name!r} not found")
    since = timezone.now() - timedelta(minutes=minutes)
    rows = list(HostUsageSample.objects.filter(host=host, at__gte=since).order_by("at"))
    return HostMetrics(
        name=host.name,
        minutes=minutes,
        series=HostSeries(
            at=[r.at for r in rows],
            cpu_percent=[r.cpu_percent for r in rows],
            memory_percent=[r.memory_percent for r in rows],
            gpu_percent=[r.gpu_percent for r in rows],
            sandboxes_running=[r.sandboxes_running for r in rows] if admin else None,
        ),
    )


def sample_all_usage(principal: Principal) -> dict[str, object]:
    """The sampling task: one round, or several SANDHUB_USAGE_SAMPLE_SECONDS apart where
    that is under the schedule's minute."""
    _require_platform(principal, "sample usage")
    rounds, interval = usage.rounds_per_run()
    reports: list[usage.UsageRound] = []
    for number in range(rounds):
        if number:
            time.sleep(max(0.0, interval - reports[-1].seconds))  # pacing, not waiting on anything
        reports.append(usage.sample_round())
    return reports[-1].as_dict() | {"rounds": rounds}
