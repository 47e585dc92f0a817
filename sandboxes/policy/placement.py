"""Choosing a host for a new sandbox: enabled, not draining, healthy, visible to the team,
with room; the idlest first."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, F, Q, Value
from django.db.models.functions import Greatest

from hosts.backends.base import ProbeResult
from hosts.backends.gpus import GpuUse, NotEnoughGpus, gpu_pick_cost, pick_gpus
from hosts.models import Host
from sandboxes.contract.errors import NoCapacity
from sandboxes.models import KEPT_STATUSES, LIVE_STATUSES, PAUSED_STATUSES
from tenants.models import Team

# A host's slots are taken by what holds CPU or memory there (a paused sandbox keeps its
# memory); its GPUs by every sandbox kept on it, paused and stopped ones too (they get the
# same GPUs back when they resume: CUDA_VISIBLE_DEVICES was theirs from the start).
ON_HOST_STATUSES = LIVE_STATUSES | PAUSED_STATUSES


def usable_by(team: Team) -> Q:
    """Hosts the team may get sandboxes on: shared or its own; an SSH host only once its key
    is pinned, and, when sandboxes there cannot be isolated from each other (their own Unix
    user, namespaces, whole-sandbox limits: Host.isolated, from probes; Host.isolation_missing
    says why not), only by the team it is private to."""
    ssh_ok = ~Q(host_key_pinned="") & (Q(isolated=True) | Q(team=team))
    return (Q(team__isnull=True) | Q(team=team)) & (~Q(kind=Host.Kind.SSH) | ssh_ok)


def candidate_hosts(team: Team, kind: str | None = None):
    """Hosts with room for a new sandbox of the team, idlest first (of `kind` when given)."""
    hosts = Host.objects.filter(kind=kind) if kind else Host.objects.all()
    return (
        hosts.filter(enabled=True, draining=False, healthy=True)
        .filter(usable_by(team))
        .filter(kind__in=list(settings.SANDHUB_BACKENDS))
        .annotate(live=Count("sandboxes", filter=Q(sandboxes__status__in=ON_HOST_STATUSES)))
        .filter(live__lt=F("max_sandboxes"))
        .order_by("-idle_score", "live", "name")
    )


@dataclass(frozen=True)
class Placement:
    host: Host
    gpus: tuple[int, ...] = ()  # the host's GPU indices given to the sandbox


def choose_host(
    team: Team, gpus: int = 0, *, kind: str | None = None, prefer: int | None = None
) -> Placement:
    """The idlest host with room; with `gpus`, the one whose freest GPUs are freest (fewest
    sandboxes already on them, then least busy), and those GPUs. Call it inside the
    transaction that creates the sandbox: the GPUs are taken from what live sandboxes hold.

    kind: only hosts of that kind (a sandbox from a snapshot); prefer: that host (the one
    holding the snapshot: nothing to move) while it has room."""
    if not gpus:
        hosts = candidate_hosts(team, kind)
        host = (hosts.filter(pk=prefer).first() if prefer else None) or hosts.first()
        if host is None:
            where = f"{kind} host (the snapshot's kind)" if kind else "host"
            raise NoCapacity(
                f"no {where} has room for a new sandbox right now; delete an unused sandbox "
                "or ask an admin to add capacity"
            )
        return _taken(Placement(host))
    best: tuple[tuple[int, float, float], Placement] | None = None
    for host in candidate_hosts(team, kind).filter(gpu_count__gte=gpus):
        devices = [GpuUse.from_dict(g) for g in host.gpus]
        assigned = gpu_assignments(host)
        try:
            taken, busy = gpu_pick_cost(devices, assigned, gpus)
            picked = tuple(pick_gpus(devices, assigned, gpus))
        except NotEnoughGpus:
            continue
        rank = (taken, busy, -host.idle_score)
        if best is None or rank < best[0]:
            best = (rank, Placement(host, picked))
    if best is None:
        raise NoCapacity(_no_gpu_host(team, gpus))
    return _taken(best[1])


def _taken(placement: Placement) -> Placement:
    """Count the new sandbox in its host's idle score until the next probe measures it.

    Probes run every so often; without this, every sandbox of a burst went to the host that
    was idlest at the last probe, however many came. The debit is the one part of the score
    known without asking the host (one more sandbox of max_sandboxes); the probe replaces it
    with what the host says. Inside the creating transaction: a failed creation gives it back.
    """
    host = placement.host
    debit = 1.0 / host.max_sandboxes if host.max_sandboxes else 1.0
    Host.objects.filter(pk=host.pk).update(idle_score=Greatest(F("idle_score") - debit, Value(0.0)))
    return placement


def gpu_assignments(host: Host) -> dict[int, int]:
    """GPU index -> sandboxes holding it on this host (live, paused or stopped)."""
    counts: Counter[int] = Counter()
    for held in host.sandboxes.filter(status__in=KEPT_STATUSES).values_list("gpus", flat=True):
        counts.update(int(index) for index in held or [])
    return dict(counts)


def _no_gpu_host(team: Team, gpus: int) -> str:
    most = max((h.gpu_count for h in Host.objects.filter(usable_by(team))), default=0)
    if most < gpus:
        return f"no host of yours has {gpus} GPUs (the most any has is {most})"
    return f"no host with {gpus} GPUs has room right now; try again later or ask for fewer"


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
