"""The platform's state, read from the database when Prometheus scrapes: sandboxes by status
and host, hosts' health and idle scores, warm pools (their size against what is ready), the
django-q2 queue and its failed tasks, the egress proxy's refusals.

A handful of aggregate queries per scrape (no row is loaded one by one), run once by the
process that answers the scrape: these are facts about the platform, not about a process,
so summing them over processes (as counters are) would be wrong.

Labels: host and image names (an operator's, a few each), statuses and refusal reasons (fixed
sets). No team label: teams grow with the tenants, and a series per team and status would
cost every scrape for what the admin's pages already show.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db.models import Count, Sum
from django_q.models import Failure, OrmQ
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hosts.models import Host, Image
from sandboxes.housekeeping.poolfill import pool_size
from sandboxes.models import (
    EgressRefusal,
    Sandbox,
    SandboxStatus,
    WarmContainer,
    WarmContainerStatus,
)

NO_HOST = "none"  # a sandbox not placed yet (or whose host was removed)


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        hosts = list(
            Host.objects.values(
                "name", "kind", "enabled", "draining", "healthy", "idle_score", "max_sandboxes"
            )
        )
        yield from _sandboxes()
        yield from _hosts(hosts)
        yield from _pools(hosts)
        yield from _queue()
        yield from _egress_refusals()
        took = GaugeMetricFamily(
            "sandhub_metrics_database_seconds",
            "Time this scrape spent reading the database.",
        )
        took.add_metric([], time.perf_counter() - started)
        yield took


def _sandboxes() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "sandhub_sandboxes",
        "Sandboxes (not deleted) by status and host.",
        labels=["status", "host"],
    )
    rows = (
        Sandbox.objects.exclude(status=SandboxStatus.DELETED)
        .values("status", "host__name")
        .annotate(count=Count("id"))
        .order_by()
    )
    for row in rows:
        family.add_metric([row["status"], row["host__name"] or NO_HOST], row["count"])
    yield family


def _hosts(hosts: Sequence[Mapping[str, Any]]) -> Iterator[Metric]:
    labels = ["host", "kind"]
    idle = GaugeMetricFamily(
        "sandhub_host_idle_score",
        "The host's idle score from its last probe: 0 saturated, 1 idle.",
        labels=labels,
    )
    healthy = GaugeMetricFamily(
        "sandhub_host_healthy", "1 if the host's last probe succeeded.", labels=labels
    )
    accepting = GaugeMetricFamily(
        "sandhub_host_accepting",
        "1 if the host takes new sandboxes (enabled, not draining).",
        labels=labels,
    )
    capacity = GaugeMetricFamily(
        "sandhub_host_max_sandboxes", "The host's sandbox limit.", labels=labels
    )
    for host in hosts:
        key = [host["name"], host["kind"]]
        idle.add_metric(key, host["idle_score"])
        healthy.add_metric(key, float(host["healthy"]))
        accepting.add_metric(key, float(host["enabled"] and not host["draining"]))
        capacity.add_metric(key, host["max_sandboxes"])
    yield from (idle, healthy, accepting, capacity)


def _pools(hosts: Sequence[Mapping[str, Any]]) -> Iterator[Metric]:
    """Per host and image: the size the pool is kept at, and its ready and starting members."""
    labels = ["host", "image"]
    target = GaugeMetricFamily(
        "sandhub_pool_target", "Warm-pool size wanted on the host for the image.", labels=labels
    )
    members = GaugeMetricFamily(
        "sandhub_pool_members",
        "Warm-pool members by state (ready, provisioning).",
        labels=[*labels, "state"],
    )
    sizes = {image.name: pool_size(image) for image in Image.objects.only("name", "warm_pool_size")}
    for host in hosts:
        if host["kind"] in settings.SANDHUB_BACKENDS and _takes_pool(host):
            for image, size in sizes.items():
                if size:
                    target.add_metric([host["name"], image], size)
    rows = (
        WarmContainer.objects.exclude(status=WarmContainerStatus.CLAIMED)
        .values("host__name", "image__name", "status")
        .annotate(count=Count("id"))
        .order_by()
    )
    for row in rows:
        members.add_metric([row["host__name"], row["image__name"], row["status"]], row["count"])
    yield from (target, members)


def _takes_pool(host: Mapping[str, Any]) -> bool:
    return host["healthy"] and host["enabled"] and not host["draining"]  # as poolfill.refill


def _queue() -> Iterator[Metric]:
    queued = GaugeMetricFamily(
        "sandhub_queue_tasks",
        "Background tasks in django-q2's ORM broker (queued or being worked on).",
    )
    queued.add_metric([], OrmQ.objects.count())
    failed = GaugeMetricFamily(
        "sandhub_queue_failed_tasks", "Failed tasks django-q2 keeps on record."
    )
    failed.add_metric([], Failure.objects.count())
    yield from (queued, failed)


def _egress_refusals() -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "sandhub_egress_refusals",
        "Connections the egress proxy refused, by reason, for sandboxes not yet purged.",
        labels=["reason"],
    )
    rows = EgressRefusal.objects.values("reason").annotate(total=Sum("count")).order_by()
    for row in rows:
        family.add_metric([row["reason"]], row["total"] or 0)
    yield family
