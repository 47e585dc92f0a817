"""Reconciliation: make each host and the database agree (orphans removed, vanished sandboxes
lost, silent hosts down, vanished pool members forgotten)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from hosts.backends import get_backend
from hosts.backends.base import BackendError, ManagedResource, ProbeResult, Unsupported
from hosts.models import Host
from sandboxes.housekeeping import transitions
from sandboxes.housekeeping.config import (
    DEFAULT_INSTANCE,
    instance_name,
    orphan_grace_seconds,
    system_for,
)
from sandboxes.housekeeping.probes import probe_unconfigured_too, record_probe
from sandboxes.models import (
    CHANGING_STATUSES,
    Sandbox,
    SandboxStatus,
    Snapshot,
    SnapshotStatus,
    WarmContainer,
    WarmContainerStatus,
)
from tenants import audit

logger = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    removed: list[str] = field(default_factory=list)  # label ids of orphans removed
    lost: list[str] = field(default_factory=list)  # sandbox ids marked lost
    down: list[str] = field(default_factory=list)  # hosts that do not answer
    stale_pool: list[str] = field(default_factory=list)  # ready pool rows without a container
    settled: list[str] = field(default_factory=list)  # claims (pausing, ...) left by the dead
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def reconcile(hosts: list[Host] | None = None, *, grace: float | None = None) -> ReconcileReport:
    """Make each host and the database agree.

    - a host that does not answer is marked unhealthy (placement skips it); one that answers
      again is marked healthy;
    - a container or volume of this deployment that no sandbox or pool member owns, older
      than the grace period, is removed; so are snapshot files no snapshot row names;
    - a running, paused or stopped sandbox whose container is gone is marked lost (a
      paused or stopped container is listed like any other: not lost);
    - a pause, resume or stop claimed long ago by a process that died mid-way is settled to
      what the host says the sandbox is;
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
    result = probe_unconfigured_too(host)
    record_probe(host, result)
    if not result.healthy:
        report.down.append(host.name)
        return
    listed_at, listed_at_time = timezone.now(), time.time()
    try:
        resources = get_backend(host).list_managed()
    except Unsupported:
        return
    except BackendError as exc:
        record_probe(host, ProbeResult(healthy=False, error=str(exc)))
        report.down.append(host.name)
        return
    snapshots = [r for r in resources if r.kind == "snapshot"]
    resources = [r for r in resources if r.kind != "snapshot"]
    # Read ownership after listing: anything created before the listing is in the database
    # by now (rows are committed before their containers are made).
    owned = _owned_label_ids()
    _remove_orphans(host, resources, owned, listed_at_time - grace, report)
    _remove_orphan_snapshots(host, snapshots, listed_at_time - grace, report)
    # What a sandbox lives in: a container (Docker), a directory (SSH hosts).
    present = {r.label_id for r in resources if r.kind in _HOMES}
    _mark_lost(host, present, listed_at, report)
    _settle_stuck_claims(host, listed_at, report)
    _forget_vanished_pool_members(host, present, listed_at - timedelta(seconds=grace), report)


_HOMES = ("container", "directory")


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
    backend = get_backend(host)
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


def _remove_orphan_snapshots(
    host: Host, found: list[ManagedResource], born_before: float, report: ReconcileReport
) -> None:
    """Snapshot files of this deployment that no snapshot row (not deleted) names: one whose
    taking was cut short, or the copy a sandbox on another host was started from. Young ones
    are left alone, as containers are (a snapshot is written before its row is ready)."""
    if not found:
        return
    kept = set(
        Snapshot.objects.exclude(status=SnapshotStatus.DELETED).values_list("public_id", flat=True)
    )
    mine = instance_name()
    backend = get_backend(host)
    for resource in found:
        if resource.label_id in kept or (resource.instance or DEFAULT_INSTANCE) != mine:
            continue
        if resource.created_at is None or resource.created_at > born_before:
            continue
        backend.delete_snapshot(resource.state)
        report.removed.append(resource.label_id)
        audit.record(
            system_for(None),
            "reconcile.orphan_removed",
            target_type="snapshot",
            target_id=resource.label_id[:64],
            details={"host": host.name, "removed": [f"snapshot {resource.name}"]},
        )


def _instance_of(group: list[ManagedResource]) -> str:
    """The deployment a container says it belongs to (volumes carry no instance label)."""
    labelled = [r.instance for r in group if r.instance]
    return labelled[0] if labelled else DEFAULT_INSTANCE


def _mark_lost(host: Host, present: set[str], listed_at: datetime, report: ReconcileReport) -> None:
    # Only sandboxes in their state since before the listing: a container started after it
    # is not in it. The UPDATE is conditional, so a sandbox deleted meanwhile is left alone.
    running = Q(status=SandboxStatus.RUNNING, started_at__lt=listed_at)
    kept = Q(
        status__in=[SandboxStatus.PAUSED, SandboxStatus.STOPPED],
        status_changed_at__lt=listed_at,
    )
    watched = Sandbox.objects.filter(host=host).filter(running | kept)
    watched = watched.select_related("team", "warm_container")
    for sandbox in watched:
        label_id = _label_id_of(sandbox)
        if label_id in present:
            continue
        message = "its container disappeared from the host (found by reconciliation)"
        if sandbox.transition_if(SandboxStatus.LOST, message):
            report.lost.append(sandbox.public_id)
            audit.record(
                system_for(sandbox.team),
                "sandbox.lost",
                target_type="sandbox",
                target_id=sandbox.public_id,
                details={"host": host.name, "container": label_id},
            )


# A claim this old was left by a process that died while calling the host (a pause takes
# milliseconds, a stop or start seconds).
STUCK_CLAIM = timedelta(minutes=10)


def _settle_stuck_claims(host: Host, listed_at: datetime, report: ReconcileReport) -> None:
    stuck = Sandbox.objects.filter(
        host=host, status__in=CHANGING_STATUSES, status_changed_at__lt=listed_at - STUCK_CLAIM
    ).select_related("team", "host")
    backend = get_backend(host)
    for sandbox in stuck:
        settled = transitions.host_status(backend, sandbox)
        message = f"{sandbox.status} did not finish (its process stopped); the host says {settled}"
        if sandbox.transition_if(settled, message):
            report.settled.append(sandbox.public_id)
            audit.record(
                system_for(sandbox.team),
                "sandbox.settled",
                target_type="sandbox",
                target_id=sandbox.public_id,
                details={"host": host.name, "status": settled},
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
