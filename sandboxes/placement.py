"""Choosing a host for a new sandbox: enabled, not draining, healthy, visible to the team,
with room; the idlest first."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Count, F, Q

from hosts.backends.base import ProbeResult
from hosts.models import Host
from sandboxes.errors import NoCapacity
from sandboxes.models import LIVE_STATUSES
from tenants.models import Team


def candidate_hosts(team: Team):
    return (
        Host.objects.filter(enabled=True, draining=False, healthy=True)
        .filter(Q(team__isnull=True) | Q(team=team))
        .filter(kind__in=list(settings.SANDHUB_BACKENDS))
        .annotate(live=Count("sandboxes", filter=Q(sandboxes__status__in=LIVE_STATUSES)))
        .filter(live__lt=F("max_sandboxes"))
        .order_by("-idle_score", "live", "name")
    )


def choose_host(team: Team) -> Host:
    host = candidate_hosts(team).first()
    if host is None:
        raise NoCapacity(
            "no host has room for a new sandbox right now; delete an unused sandbox or "
            "ask an admin to add capacity"
        )
    return host


def visible_hosts(team: Team | None):
    return Host.objects.filter(Q(team__isnull=True) | Q(team=team)).order_by("-idle_score", "name")


def idle_score(host: Host, probe: ProbeResult) -> float:
    """1 for an idle host, 0 for a saturated or unhealthy one: the busiest resource decides."""
    if not probe.healthy:
        return 0.0
    loads = [probe.sandboxes_running / host.max_sandboxes if host.max_sandboxes else 1.0]
    loads += [
        p / 100
        for p in (probe.cpu_percent, probe.memory_percent, probe.gpu_percent)
        if p is not None
    ]
    return round(max(0.0, min(1.0, 1.0 - max(loads))), 3)
