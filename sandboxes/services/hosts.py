"""Hosts as teams and admins see them, and the housekeeping runs (sweep, reconciliation,
probes, warm pool) that the django-q2 schedules in sandboxes/tasks.py call as the system."""

from __future__ import annotations

from hosts.models import Host
from sandboxes.contract.errors import NotFound, PermissionDenied
from sandboxes.contract.results import GpuInfo, HostInfo
from sandboxes.housekeeping import pool, probes, reconcile, sweep
from sandboxes.models import Preview
from sandboxes.policy import access, placement
from sandboxes.policy.access import READ
from sandboxes.services import terminals
from tenants.auditing import AUDIT_VIEW, audited, change, current
from tenants.models import Team
from tenants.principal import Principal


@audited("host.list", "host", kind=AUDIT_VIEW)
def list_hosts(principal: Principal) -> list[HostInfo]:
    """Hosts the principal's team may use (shared and its private ones), idlest first.

    Each host's count of running sandboxes is the team's own: the count of every team would
    show other tenants' activity. Platform admins see every team's.
    """
    access.require(principal, READ, "list hosts")
    admin = access.is_platform_admin(principal)
    hosts = (
        Host.objects.all()
        if admin and principal.team is None
        else placement.visible_hosts(principal.team)
    )
    return [_host_info(h, None if admin else principal.team) for h in hosts]


def _host_info(host: Host, team: Team | None = None) -> HostInfo:
    """The host as shown; `team`: count only that team's running sandboxes."""
    running = host.sandboxes.live()
    if team is not None:
        running = running.filter(team=team)
    return HostInfo(
        name=host.name,
        kind=host.kind,
        private=host.team_id is not None,
        enabled=host.enabled,
        draining=host.draining,
        healthy=host.healthy,
        idle_score=host.idle_score,
        cpu_percent=host.cpu_percent,
        memory_percent=host.memory_percent,
        gpu_percent=host.gpu_percent,
        sandboxes_running=running.count(),
        max_sandboxes=host.max_sandboxes,
        last_probe_at=host.last_probe_at,
        last_error=host.last_error,
        gpus=[GpuInfo.model_validate(gpu) for gpu in host.gpus or []],
    )


@audited("host.probe", "host")
def probe_host(principal: Principal, host_id: int) -> HostInfo:
    """Ask the host how it is, store the figures and an idle score (platform admins only)."""
    host = admin_host(principal, host_id)
    # The same probe and bookkeeping as the scheduled one (GPU, host.down / host.up rows).
    result = probes.probe(host)
    with change():
        probes.record_probe(host, result)
        current().details.update({"healthy": result.healthy, "idle_score": host.idle_score})
    return _host_info(host)


@audited("host.drain", "host", atomic=True)
def set_host_draining(principal: Principal, host_id: int, draining: bool = True) -> HostInfo:
    host = admin_host(principal, host_id)
    host.draining = bool(draining)
    host.save(update_fields=["draining"])
    current().details["draining"] = host.draining
    return _host_info(host)


def admin_host(principal: Principal, host_id: int) -> Host:
    current().target("host", host_id)
    if not access.is_platform_admin(principal):
        raise PermissionDenied("only platform admins manage hosts")
    host = Host.objects.filter(pk=host_id).first()
    if host is None:
        raise NotFound(f"host {host_id} not found")
    return host


# --- housekeeping: auto-cleanup, reconciliation, host probes, warm pool ----------------------
# Run by the django-q2 schedules in sandboxes/tasks.py as the system; the work is done in
# sandboxes/housekeeping/. The runs themselves leave no audit row (one
# a minute would bury the log); what they change does: sandbox.expire, sandbox.idle,
# sandbox.lost, host.down, host.up, reconcile.orphan_removed.


def sweep_expired_and_idle(principal: Principal) -> sweep.SweepReport:
    """Delete sandboxes past their lifetime or idle beyond their team's idle timeout."""
    _require_platform(principal, "sweep sandboxes")
    report = sweep.sweep()
    # The previews of what it deleted, and of sandboxes that stopped any other way (deleted
    # without waiting, lost): closed on record too.
    Preview.objects.stop_where_sandbox_stopped()
    terminals.close_stale_terminals()  # of stopped sandboxes, and holders that ended
    return report


def reconcile_hosts(principal: Principal) -> reconcile.ReconcileReport:
    """Remove orphan containers, mark vanished sandboxes lost and silent hosts down."""
    _require_platform(principal, "reconcile hosts")
    report = reconcile.reconcile()
    Preview.objects.stop_where_sandbox_stopped()  # of sandboxes it found lost
    return report


def probe_all_hosts(principal: Principal) -> list[HostInfo]:
    """Probe every enabled host at once and store health, load and idle score."""
    _require_platform(principal, "probe hosts")
    return [_host_info(host) for host in probes.probe_hosts()]


def refill_warm_pools(principal: Principal) -> pool.RefillReport:
    """Start or remove warm-pool containers until each pool has its size."""
    _require_platform(principal, "refill warm pools")
    return pool.refill()


def _require_platform(principal: Principal, doing: str) -> None:
    if not access.is_platform_admin(principal):
        raise PermissionDenied(f"only the system and platform admins may {doing}")
