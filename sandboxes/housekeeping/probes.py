"""Host probes: health, load and an idle score per host, with host.down / host.up audit rows
when a host's health changes."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.utils import timezone

from hosts.backends import get_backend
from hosts.backends.base import BackendError, HostKeyRejected, ProbeResult
from hosts.models import Host
from sandboxes.housekeeping import usage
from sandboxes.housekeeping.config import system_for
from sandboxes.policy import placement
from tenants import audit

logger = logging.getLogger(__name__)

_PROBE_THREADS = 8


def probe(host: Host) -> ProbeResult:
    """The host's health and load: an unreachable host is an unhealthy one, not an error.

    Raises BackendError only when no backend is configured for the host's kind.
    """
    backend = get_backend(host)
    try:
        result = backend.probe()
    except HostKeyRejected as exc:
        rejected = {"key_type": exc.key_type, "fingerprint": exc.fingerprint}
        return ProbeResult(healthy=False, error=str(exc), details={"host_key_rejected": rejected})
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


def probe_unconfigured_too(host: Host) -> ProbeResult:
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
    _record_host_facts(host, result.details)
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
            "gpus",
            "gpu_count",
            "per_sandbox_users",
            "isolated",
            "isolation_missing",
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
    # Threads only talk to hosts; the database is read and written from this thread: the
    # credential a backend connects with (TLS engines, SSH hosts) is loaded here, or each
    # thread would open a database connection of its own to read it.
    for host in hosts:
        _ = host.credential if host.credential_id else None
    with ThreadPoolExecutor(max_workers=min(_PROBE_THREADS, len(hosts))) as executor:
        results = list(executor.map(probe_unconfigured_too, hosts))
    recorded = [record_probe(host, result) for host, result in zip(hosts, results, strict=True)]
    usage.record_host_samples(recorded, results)  # the hosts pages' charts
    return recorded


def _record_host_facts(host: Host, details: dict[str, Any]) -> None:
    """What a probe learnt beyond load: per-GPU use, whether sandboxes get users of their
    own and are isolated (and if not, why); and a host key that was refused, remembered (with
    an audit row, once per key) so an admin sees what the host now presents."""
    if "gpus" in details:
        host.gpus = list(details["gpus"])
        host.gpu_count = len(host.gpus)
    if "per_sandbox_users" in details:
        host.per_sandbox_users = bool(details["per_sandbox_users"])
    if "isolated" in details or "per_sandbox_users" in details:  # an SSH host's facts
        # A probe that does not say (an older one) leaves the host not isolated.
        host.isolated = bool(details.get("isolated"))
        host.isolation_missing = "\n".join(str(r) for r in details.get("isolation_missing") or ())
    rejected = details.get("host_key_rejected") or {}
    fingerprint = rejected.get("fingerprint", "")
    if fingerprint and fingerprint != host.host_key_seen:
        Host.objects.filter(pk=host.pk).update(
            host_key_seen=fingerprint,
            host_key_type=rejected.get("key_type", ""),
            host_key_seen_at=timezone.now(),
        )
        host.host_key_seen = fingerprint
        audit.record(
            system_for(host.team),
            "host.key.rejected",
            target_type="host",
            target_id=str(host.pk),
            outcome="refused",
            details={"host": host.name, "presented": fingerprint, "pinned": host.host_key_pinned},
        )
        logger.error("host %s presented key %s, not the pinned one", host, fingerprint)
