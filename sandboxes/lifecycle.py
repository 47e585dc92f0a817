"""Housekeeping that keeps hosts and the database in agreement: auto-cleanup, host probes and
reconciliation. The django-q2 schedules (sandboxes/tasks.py) run it through the service entry
points at the end of sandboxes/services.py, as the system.

Everything here decides from database rows and what hosts answer now, never from timers kept
in a process, so a restart of any web or worker process cannot leave a sandbox alive forever:
the next run finds the same rows.

Tunables are read from Django settings, else from the environment, else a default:
SANDHUB_INSTANCE, SANDHUB_ORPHAN_GRACE_SECONDS (see below).
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from hosts.backends.base import (
    LABEL_INSTANCE,
    BackendError,
    ManagedResource,
    ProbeResult,
    Unsupported,
)
from hosts.models import Host
from sandboxes import placement
from sandboxes.auditing import audited, current
from sandboxes.errors import BackendFailure, ServiceError
from sandboxes.models import (
    CommandExecution,
    CommandStatus,
    Sandbox,
    SandboxStatus,
    WarmContainer,
    WarmContainerStatus,
)
from tenants import audit
from tenants.models import Team
from tenants.principal import Principal

logger = logging.getLogger(__name__)

T = TypeVar("T", int, str)

# Containers of another deployment sharing an engine carry another instance name and are never
# touched; containers made before instance labels existed count as the default instance's.
DEFAULT_INSTANCE = "default"
# Reconciliation leaves alone whatever is younger than this, whatever the database says: a
# sandbox or pool member being created right now, a clock a little off on a remote host.
DEFAULT_ORPHAN_GRACE_SECONDS = 600
# Sandboxes the sweep may delete: pending/starting are being created, stopping being deleted.
SWEEPABLE = (
    SandboxStatus.RUNNING,
    SandboxStatus.STOPPED,
    SandboxStatus.ERROR,
    SandboxStatus.LOST,
)
# Statuses a sandbox passes through while a request creates or deletes it. One still in them
# this long after its expiry was left there by a process that died mid-way (and may still
# hold a container, and counts against its team's quota): the sweep finishes the job.
IN_FLIGHT = (SandboxStatus.PENDING, SandboxStatus.STARTING, SandboxStatus.STOPPING)
STUCK_AFTER_EXPIRY = timedelta(minutes=10)
# A sandbox with a command queued or running is in use, whatever last_activity_at says: a
# background job (or a long foreground one) only touches it when it finishes.
BUSY_COMMAND_STATUSES = (CommandStatus.QUEUED, CommandStatus.RUNNING)
_PROBE_THREADS = 8


def setting(name: str, default: T) -> T:
    """settings.NAME if defined, else the environment variable NAME, else the default."""
    if hasattr(settings, name):
        return type(default)(getattr(settings, name))
    raw = os.environ.get(name, "").strip()
    return type(default)(raw) if raw else default


def instance_name() -> str:
    return setting("SANDHUB_INSTANCE", DEFAULT_INSTANCE) or DEFAULT_INSTANCE


def instance_labels() -> dict[str, str]:
    """Labels every container Sandhub makes carries, so reconciliation knows its own."""
    return {LABEL_INSTANCE: instance_name()}


def orphan_grace_seconds() -> int:
    return setting("SANDHUB_ORPHAN_GRACE_SECONDS", DEFAULT_ORPHAN_GRACE_SECONDS)


def system_for(team: Team | None) -> Principal:
    return Principal.system(team)


# --- auto-cleanup ----------------------------------------------------------------------------


@dataclass
class SweepReport:
    expired: list[str] = field(default_factory=list)
    idle: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    abandoned_commands: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sweep(now: datetime | None = None) -> SweepReport:
    """Delete sandboxes past expires_at, then those idle beyond their team's idle timeout.

    Sandboxes on hosts that do not answer wait until they do (their deletion would fail).
    Each deletion first moves the row to stopping with a conditional UPDATE, so two workers
    sweeping at once never delete the same sandbox twice, and a command that starts in the
    meantime keeps an idle sandbox alive.
    """
    now = now or timezone.now()
    report = SweepReport(abandoned_commands=close_abandoned_commands(now))
    for sandbox in _sweepable().filter(expires_at__lte=now):
        if _claim(sandbox, Q(expires_at__lte=now), "expired", now):
            _retire_reporting(sandbox, "expire", report.expired, report)
    stuck = Q(expires_at__lte=now - STUCK_AFTER_EXPIRY)
    for sandbox in _sweepable(IN_FLIGHT).filter(stuck):
        if _claim(sandbox, stuck, f"expired while {sandbox.status}, and stuck there", now):
            _retire_reporting(sandbox, "expire", report.expired, report)
    for team in _teams_with_idle_timeout():
        cutoff = now - timedelta(minutes=team.idle_timeout_minutes)
        idle = Q(last_activity_at__lt=cutoff) & ~Q(Exists(_busy_commands()))
        for sandbox in _sweepable().filter(team=team).filter(idle):
            if _claim(sandbox, idle, f"idle for over {team.idle_timeout_minutes} minutes", now):
                _retire_reporting(sandbox, "idle", report.idle, report)
    return report


# How long past its own deadline a command row may stay unfinished before the sweep decides
# the process recording it died (a web process killed mid-command, a crash mid-start).
ABANDONED_AFTER = timedelta(minutes=5)


def close_abandoned_commands(now: datetime) -> int:
    """Mark as error the command rows whose recorder died, so they stop keeping sandboxes busy.

    A foreground command past its timeout plus a grace period, or a background command
    still queued (never started) after the grace period, will never be finished by anyone.
    Running background commands are not touched: their job records its own end and
    recover_background supervises them again.
    """
    # Few rows are ever running at once: the per-row deadline is checked here, not in SQL,
    # where duration arithmetic differs between SQLite and PostgreSQL.
    running = CommandExecution.objects.filter(
        background=False, status=CommandStatus.RUNNING, started_at__lt=now - ABANDONED_AFTER
    ).values_list("pk", "started_at", "timeout_seconds")
    overdue_foreground = CommandExecution.objects.filter(
        status=CommandStatus.RUNNING,
        pk__in=[
            pk
            for pk, started_at, timeout in running
            if started_at + timedelta(seconds=timeout) + ABANDONED_AFTER < now
        ],
    )
    never_started = CommandExecution.objects.filter(
        background=True, status=CommandStatus.QUEUED, created_at__lt=now - ABANDONED_AFTER
    )
    closed = 0
    for rows, why in (
        (overdue_foreground, "abandoned: the process running it stopped before recording"),
        (never_started, "abandoned: the process starting it stopped before it started"),
    ):
        closed += rows.update(status=CommandStatus.ERROR, error_message=why, finished_at=now)
    return closed


def _sweepable(statuses: tuple[str, ...] = SWEEPABLE) -> QuerySet[Sandbox]:
    return (
        Sandbox.objects.filter(status__in=statuses)
        .filter(Q(host__isnull=True) | Q(host__healthy=True))
        .select_related("team", "host", "image")
        .order_by("pk")
    )


def _teams_with_idle_timeout() -> QuerySet[Team]:
    # 0 turns the idle timeout off for a team.
    return Team.objects.filter(
        idle_timeout_minutes__gt=0, sandboxes__status__in=SWEEPABLE
    ).distinct()


def _busy_commands() -> QuerySet[CommandExecution]:
    return CommandExecution.objects.filter(sandbox=OuterRef("pk"), status__in=BUSY_COMMAND_STATUSES)


def _claim(sandbox: Sandbox, still: Q, why: str, now: datetime) -> bool:
    """Move the sandbox to stopping if it is still as the sweep saw it; True if this worker won.

    Compare-and-set on status and message: a stuck sandbox is stopping already, and the
    new message (with the time) is what tells a second sweeper it lost.
    """
    message = f"auto-cleanup at {now:%Y-%m-%d %H:%M:%S} UTC: {why}"
    won = (
        Sandbox.objects.filter(
            pk=sandbox.pk, status=sandbox.status, status_message=sandbox.status_message
        )
        .filter(still)
        .update(status=SandboxStatus.STOPPING, status_message=message)
    )
    if won:
        sandbox.status = SandboxStatus.STOPPING
        sandbox.status_message = message
    return bool(won)


def _retire_reporting(sandbox: Sandbox, reason: str, done: list[str], report: SweepReport) -> None:
    try:
        retire(system_for(sandbox.team), sandbox, reason)
    except ServiceError as exc:
        report.failed[sandbox.public_id] = exc.message
    else:
        done.append(sandbox.public_id)


@audited("sandbox.expire", "sandbox")
def retire(principal: Principal, sandbox: Sandbox, reason: str) -> None:
    """Remove a sandbox the sweep claimed (status stopping); audited as sandbox.<reason>."""
    draft = current()
    draft.action = f"sandbox.{reason}"
    draft.target("sandbox", sandbox.public_id)
    draft.details.update(
        {
            "reason": sandbox.status_message,
            "host": sandbox.host.name if sandbox.host else None,
            "last_activity_at": sandbox.last_activity_at.isoformat(),
            "expires_at": sandbox.expires_at.isoformat() if sandbox.expires_at else None,
        }
    )
    try:
        if sandbox.host and sandbox.backend_state:
            sandbox.host.backend().destroy(sandbox.backend_state)
    except Exception as exc:  # whatever it was, never leave the sandbox claimed (stopping)
        # Left in error: the next sweep tries again (error sandboxes are sweepable).
        sandbox.transition(SandboxStatus.ERROR, f"auto-cleanup failed: {exc}")
        sandbox.save(update_fields=["status", "status_message"])
        raise BackendFailure(f"could not delete sandbox {sandbox.public_id}: {exc}") from exc
    sandbox.transition(SandboxStatus.DELETED, sandbox.status_message)
    sandbox.save()


# --- host probes -----------------------------------------------------------------------------


def probe(host: Host) -> ProbeResult:
    """The host's health and load: an unreachable host is an unhealthy one, not an error.

    Raises BackendError only when no backend is configured for the host's kind.
    """
    backend = host.backend()
    try:
        result = backend.probe()
    except Exception as exc:  # a probe reports, it never raises
        return ProbeResult(healthy=False, error=str(exc) or type(exc).__name__)
    if result.healthy and result.gpu_percent is None:
        result = replace(result, gpu_percent=_gpu_percent(backend))
    return result


def _gpu_percent(backend: Any) -> float | None:
    probe_gpu = getattr(backend, "probe_gpu", None)  # optional for duck-typed backends
    try:
        return probe_gpu() if probe_gpu else None
    except Exception:  # no GPU figure is no reason to call the host down
        logger.warning("GPU probe of host %s failed", backend.host, exc_info=True)
        return None


def _probe_unconfigured_too(host: Host) -> ProbeResult:
    try:
        return probe(host)
    except BackendError as exc:
        return ProbeResult(healthy=False, error=str(exc))


def record_probe(host: Host, result: ProbeResult) -> Host:
    """Store a probe on the host; a change of health leaves a host.down / host.up audit row."""
    was_healthy = host.healthy
    host.healthy = result.healthy
    host.last_probe_at = timezone.now()
    host.cpu_percent = result.cpu_percent
    host.memory_percent = result.memory_percent
    host.gpu_percent = result.gpu_percent
    host.last_error = result.error[:2000]
    host.idle_score = placement.idle_score(host, result)
    # Only the probe's fields: an admin may be changing draining or capacity at the same time.
    host.save(
        update_fields=[
            "healthy",
            "last_probe_at",
            "cpu_percent",
            "memory_percent",
            "gpu_percent",
            "last_error",
            "idle_score",
        ]
    )
    if was_healthy != result.healthy:
        audit.record(
            system_for(host.team),
            "host.up" if result.healthy else "host.down",
            target_type="host",
            target_id=str(host.pk),
            details={"host": host.name, "error": result.error[:1000]},
        )
        logger.warning("host %s is %s %s", host, "up" if result.healthy else "down", result.error)
    return host


def probe_hosts(hosts: list[Host] | None = None) -> list[Host]:
    """Probe hosts in parallel (a slow one does not hold up the others) and store the results.

    By default every enabled host whose kind has a backend.
    """
    if hosts is None:
        hosts = list(Host.objects.filter(enabled=True, kind__in=list(settings.SANDHUB_BACKENDS)))
    if not hosts:
        return []
    # Threads only talk to hosts; the database is written from this thread.
    with ThreadPoolExecutor(max_workers=min(_PROBE_THREADS, len(hosts))) as executor:
        results = list(executor.map(_probe_unconfigured_too, hosts))
    return [record_probe(host, result) for host, result in zip(hosts, results, strict=True)]


# --- reconciliation --------------------------------------------------------------------------


@dataclass
class ReconcileReport:
    removed: list[str] = field(default_factory=list)  # label ids of orphans removed
    lost: list[str] = field(default_factory=list)  # sandbox ids marked lost
    down: list[str] = field(default_factory=list)  # hosts that do not answer
    stale_pool: list[str] = field(default_factory=list)  # ready pool rows without a container
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def reconcile(hosts: list[Host] | None = None, *, grace: float | None = None) -> ReconcileReport:
    """Make each host and the database agree.

    - a host that does not answer is marked unhealthy (placement skips it); one that answers
      again is marked healthy;
    - a container or volume of this deployment that no sandbox or pool member owns, older
      than the grace period, is removed;
    - a running sandbox whose container is gone is marked lost;
    - a ready pool member whose container is gone is forgotten.
    """
    report = ReconcileReport()
    grace = orphan_grace_seconds() if grace is None else grace
    for host in _hosts_to_reconcile() if hosts is None else hosts:
        try:
            _reconcile_host(host, grace, report)
        except BackendError as exc:
            report.errors.append(f"{host.name}: {exc}")
            logger.warning("reconciling host %s failed: %s", host, exc)
    _prune_claims()
    return report


def _hosts_to_reconcile() -> list[Host]:
    """Enabled hosts, and disabled ones that still carry sandboxes or pool members."""
    carries = Q(sandboxes__status__in=[s for s in SandboxStatus if s != SandboxStatus.DELETED])
    carries |= Q(warm_containers__isnull=False)
    return list(
        Host.objects.filter(kind__in=list(settings.SANDHUB_BACKENDS))
        .filter(Q(enabled=True) | carries)
        .distinct()
    )


def _reconcile_host(host: Host, grace: float, report: ReconcileReport) -> None:
    result = _probe_unconfigured_too(host)
    record_probe(host, result)
    if not result.healthy:
        report.down.append(host.name)
        return
    listed_at, listed_at_time = timezone.now(), time.time()
    try:
        resources = host.backend().list_managed()
    except Unsupported:
        return
    except BackendError as exc:
        record_probe(host, ProbeResult(healthy=False, error=str(exc)))
        report.down.append(host.name)
        return
    # Read ownership after listing: anything created before the listing is in the database
    # by now (rows are committed before their containers are made).
    owned = _owned_label_ids()
    _remove_orphans(host, resources, owned, listed_at_time - grace, report)
    present = {r.label_id for r in resources if r.kind == "container"}
    _mark_lost(host, present, listed_at, report)
    _forget_vanished_pool_members(host, present, listed_at - timedelta(seconds=grace), report)


def _owned_label_ids() -> set[str]:
    """Ids written on containers that must stay: sandboxes not deleted, and pool members."""
    owned = set(
        Sandbox.objects.exclude(status=SandboxStatus.DELETED).values_list("public_id", flat=True)
    )
    unclaimed = Q(status__in=[WarmContainerStatus.PROVISIONING, WarmContainerStatus.READY])
    claimed = Q(status=WarmContainerStatus.CLAIMED) & ~Q(sandbox__status=SandboxStatus.DELETED)
    owned |= set(
        WarmContainer.objects.filter(unclaimed | claimed).values_list("pool_id", flat=True)
    )
    return owned


def _remove_orphans(
    host: Host,
    resources: list[ManagedResource],
    owned: set[str],
    born_before: float,
    report: ReconcileReport,
) -> None:
    groups: dict[str, list[ManagedResource]] = defaultdict(list)
    for resource in resources:
        groups[resource.label_id].append(resource)
    mine = instance_name()
    backend = host.backend()
    for label_id, group in groups.items():
        if label_id in owned or _instance_of(group) != mine:
            continue
        if any(r.created_at is None or r.created_at > born_before for r in group):
            continue
        # Containers first: a volume cannot go while a container still uses it.
        for resource in sorted(group, key=lambda r: r.kind != "container"):
            backend.destroy(resource.state)
        report.removed.append(label_id)
        audit.record(
            system_for(None),
            "reconcile.orphan_removed",
            target_type="container",
            target_id=label_id[:64],
            details={"host": host.name, "removed": [f"{r.kind} {r.name}" for r in group]},
        )


def _instance_of(group: list[ManagedResource]) -> str:
    """The deployment a container says it belongs to (volumes carry no instance label)."""
    labelled = [r.instance for r in group if r.instance]
    return labelled[0] if labelled else DEFAULT_INSTANCE


def _mark_lost(host: Host, present: set[str], listed_at: datetime, report: ReconcileReport) -> None:
    # Only sandboxes running since before the listing: a container started after it is not in
    # it. The UPDATE is conditional, so a sandbox deleted meanwhile is left alone.
    running = Sandbox.objects.filter(
        host=host, status=SandboxStatus.RUNNING, started_at__lt=listed_at
    ).select_related("team", "warm_container")
    for sandbox in running:
        label_id = _label_id_of(sandbox)
        if label_id in present:
            continue
        message = "its container disappeared from the host (found by reconciliation)"
        changed = Sandbox.objects.filter(pk=sandbox.pk, status=SandboxStatus.RUNNING).update(
            status=SandboxStatus.LOST, status_message=message
        )
        if changed:
            report.lost.append(sandbox.public_id)
            audit.record(
                system_for(sandbox.team),
                "sandbox.lost",
                target_type="sandbox",
                target_id=sandbox.public_id,
                details={"host": host.name, "container": label_id},
            )


def _label_id_of(sandbox: Sandbox) -> str:
    """The id on the sandbox's container: its own, or the pool id of the member it claimed."""
    try:
        member = sandbox.warm_container
    except WarmContainer.DoesNotExist:
        return sandbox.public_id
    return member.pool_id


def _forget_vanished_pool_members(
    host: Host, present: set[str], ready_before: datetime, report: ReconcileReport
) -> None:
    vanished = WarmContainer.objects.filter(
        host=host, status=WarmContainerStatus.READY, ready_at__lt=ready_before
    ).exclude(pool_id__in=present)
    for member in vanished:
        if WarmContainer.objects.filter(pk=member.pk, status=WarmContainerStatus.READY).delete()[0]:
            report.stale_pool.append(member.pool_id)


def _prune_claims() -> None:
    """Claim rows of deleted sandboxes tie nothing any more."""
    WarmContainer.objects.filter(
        status=WarmContainerStatus.CLAIMED, sandbox__status=SandboxStatus.DELETED
    ).delete()
