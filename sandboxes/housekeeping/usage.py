"""Usage sampling: every running sandbox's cgroup and disk, a round every
SANDHUB_USAGE_SAMPLE_SECONDS; and each host's load, from the probes housekeeping runs anyway.
Rows older than SANDHUB_USAGE_KEEP_HOURS are pruned by each round.

A round is bounded: at most USAGE_THREADS sandboxes are asked at once, and the round waits
at most SANDHUB_USAGE_ROUND_SECONDS for them; a sandbox that has not answered by then (a slow
host, a stuck agent) is left out of this round, and its thread ends on the backend's own
timeout (agentusage.USAGE_TIMEOUT). A sandbox that fails is left out too (logged): no sandbox
holds up or breaks the others'. The threads only talk to hosts; the database is read and
written from the caller's thread, in one bulk insert.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from hosts.backends import get_backend
from hosts.backends.base import ProbeResult
from hosts.backends.types import UsageSample as Reading
from hosts.models import Host
from sandboxes.models import HostUsageSample, Sandbox, SandboxStatus, UsageSample

logger = logging.getLogger(__name__)

USAGE_THREADS = 8  # an exec costs ~0.1-0.2 s of waiting on a loaded engine, little CPU here


@dataclass
class UsageRound:
    sampled: int = 0
    failed: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    pruned: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "sampled": self.sampled,
            "failed": self.failed,
            "timed_out": self.timed_out,
            "pruned": self.pruned,
            "seconds": round(self.seconds, 3),
        }


def read_usage(sandbox: Sandbox) -> Reading:
    """One sandbox's reading, through its host's backend (any thread)."""
    assert sandbox.host is not None
    return get_backend(sandbox.host).sample_usage(sandbox.backend_state)


def sample_round(sandboxes: list[Sandbox] | None = None) -> UsageRound:
    """Sample the running sandboxes (or those given), store the samples, prune old rows."""
    started = time.monotonic()
    if sandboxes is None:
        sandboxes = list(
            Sandbox.objects.filter(status=SandboxStatus.RUNNING, host__isnull=False)
            .select_related("host")
            .order_by("pk")
        )
    report = UsageRound()
    readings = _read_all(sandboxes, report)
    previous = latest_samples([s.pk for s in readings])
    rows = [
        sample_row(sandbox, reading, previous.get(sandbox.pk))
        for sandbox, reading in readings.items()
    ]
    UsageSample.objects.bulk_create(rows)
    report.sampled = len(rows)
    report.pruned = prune()
    report.seconds = time.monotonic() - started
    return report


def _read_all(sandboxes: list[Sandbox], report: UsageRound) -> dict[Sandbox, Reading]:
    if not sandboxes:
        return {}
    pool = ThreadPoolExecutor(max_workers=min(USAGE_THREADS, len(sandboxes)))
    try:
        futures: dict[Future[Reading], Sandbox] = {
            pool.submit(read_usage, sandbox): sandbox for sandbox in sandboxes
        }
        done, late = wait(futures, timeout=settings.SANDHUB_USAGE_ROUND_SECONDS)
    finally:
        # Not waiting for the late ones: each ends on its backend's timeout.
        pool.shutdown(wait=False, cancel_futures=True)
    readings: dict[Sandbox, Reading] = {}
    for future in done:
        sandbox = futures[future]
        try:
            readings[sandbox] = future.result()
        except Exception as exc:  # one broken sandbox never stops the round
            logger.info("no usage sample of sandbox %s: %s", sandbox.public_id, exc)
            report.failed.append(sandbox.public_id)
    report.timed_out = sorted(futures[f].public_id for f in late)
    return readings


def latest_samples(sandbox_pks: list[int]) -> dict[int, UsageSample]:
    """Each sandbox's latest sample of the last few intervals (the base of its CPU %)."""
    if not sandbox_pks:
        return {}
    since = timezone.now() - timedelta(seconds=3 * settings.SANDHUB_USAGE_SAMPLE_SECONDS + 60)
    latest: dict[int, UsageSample] = {}
    rows = UsageSample.objects.filter(sandbox_id__in=sandbox_pks, at__gte=since).order_by("at")
    for row in rows.only("sandbox_id", "at", "cpu_seconds"):
        latest[row.sandbox_id] = row  # ordered by time: the last one wins
    return latest


def sample_row(sandbox: Sandbox, reading: Reading, before: UsageSample | None) -> UsageSample:
    at = datetime.fromtimestamp(reading.at, tz=UTC)
    limit = reading.cpu_limit or sandbox.cpus or None
    return UsageSample(
        sandbox=sandbox,
        at=at,
        cpu_seconds=reading.cpu_seconds,
        cpu_percent=cpu_percent(before, at, reading.cpu_seconds, limit),
        cpu_limit=limit,
        memory_bytes=reading.memory_bytes,
        memory_limit_bytes=reading.memory_limit_bytes,
        disk_used_bytes=reading.disk_used_bytes,
        disk_limit_bytes=reading.disk_limit_bytes,
        pids=reading.pids,
        pids_limit=reading.pids_limit,
    )


def cpu_percent(
    before: UsageSample | None, at: datetime, cpu_seconds: float | None, limit: float | None
) -> float | None:
    """CPU time used between two samples over their interval, as a percentage of the limit;
    None without a previous sample, and when the counter went back (a restarted sandbox)."""
    if before is None or before.cpu_seconds is None or cpu_seconds is None or not limit:
        return None
    interval = (at - before.at).total_seconds()
    used = cpu_seconds - before.cpu_seconds
    if interval <= 0 or used < 0:
        return None
    return round(min(used / interval / limit * 100, 100.0), 1)


def prune(now: datetime | None = None) -> int:
    """Remove samples older than SANDHUB_USAGE_KEEP_HOURS; how many went."""
    cutoff = (now or timezone.now()) - timedelta(hours=settings.SANDHUB_USAGE_KEEP_HOURS)
    gone, _ = UsageSample.objects.filter(at__lt=cutoff).delete()
    hosts_gone, _ = HostUsageSample.objects.filter(at__lt=cutoff).delete()
    return gone + hosts_gone


def record_host_samples(hosts: list[Host], results: list[ProbeResult]) -> None:
    """A sample per probed host that answered: its load and its running sandboxes."""
    running = dict(
        Host.objects.filter(pk__in=[h.pk for h in hosts])
        .annotate(n=Count("sandboxes", filter=Q(sandboxes__status=SandboxStatus.RUNNING)))
        .values_list("pk", "n")
    )
    now = timezone.now()
    HostUsageSample.objects.bulk_create(
        HostUsageSample(
            host=host,
            at=now,
            cpu_percent=result.cpu_percent,
            memory_percent=result.memory_percent,
            gpu_percent=result.gpu_percent,
            sandboxes_running=running.get(host.pk, 0),
        )
        for host, result in zip(hosts, results, strict=True)
        if result.healthy
    )


def rounds_per_run() -> tuple[int, float]:
    """The schedule runs each minute at most: a shorter interval is rounds within a run."""
    interval = settings.SANDHUB_USAGE_SAMPLE_SECONDS
    return (max(1, 60 // interval), float(interval)) if interval < 60 else (1, float(interval))
