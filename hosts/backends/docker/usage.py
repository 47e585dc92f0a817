"""A container's cgroup read by the engine (its stats, one shot), for when the inside cannot
see it (agentusage.py): the engine reads the container's cgroup on its host."""

from __future__ import annotations

from typing import Any

import docker.errors

from hosts.backends.base import SandboxGone
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import names

__all__ = ["engine_usage"]


def engine_usage(engine: Engine, state: dict[str, Any]) -> dict[str, Any]:
    """The agent op's cgroup keys from `docker stats` (one_shot: no 1 s priming wait) and the
    container's CPU limit. SandboxGone if the container is gone."""
    container, _ = names(state)
    with engine.errors("reading the sandbox's usage"):
        try:
            stats = engine.api().stats(container, stream=False, one_shot=True)
            config = engine.api().inspect_container(container).get("HostConfig") or {}
        except docker.errors.NotFound:
            raise SandboxGone(f"container {container} is gone") from None
    memory = stats.get("memory_stats") or {}
    inner = memory.get("stats") or {}
    inactive = inner.get("total_inactive_file", inner.get("inactive_file", 0)) or 0
    usage = memory.get("usage")
    pids = stats.get("pids_stats") or {}
    nano = ((stats.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    return {
        "cpu_usec": nano // 1000 if isinstance(nano, int) else None,
        "cpu_limit": _cores(config),
        "memory": max(usage - inactive, 0) if isinstance(usage, int) else None,
        "memory_limit": config.get("Memory") or None,
        "pids": pids.get("current"),
        "pids_limit": config.get("PidsLimit") or None,
    }


def _cores(config: dict[str, Any]) -> float | None:
    if config.get("NanoCpus"):
        return round(config["NanoCpus"] / 1e9, 3)
    quota, period = config.get("CpuQuota"), config.get("CpuPeriod") or 100000
    return round(quota / period, 3) if quota and quota > 0 else None
