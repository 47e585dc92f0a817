"""Health and load of a Docker host: one ping, one info and one list call per probe.

Load is what the host's sandboxes have been given (their memory and cpu limits, summed), not
what they use right now: placement must not overcommit a host whose sandboxes are idle.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
from typing import Any

import docker.errors

from hosts.backends.base import ProbeResult
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import (
    LABEL_MANAGED,
    LABEL_MEMORY,
    LABEL_NANO_CPUS,
    claimed_pool_member,
    idle_pool_member,
)

logger = logging.getLogger(__name__)

_GPU_QUERY = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
_GPU_TIMEOUT = 5.0


class Prober:
    """Probes one engine's host."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def probe(self) -> ProbeResult:
        """Health, and what the host's sandboxes have been given, from one list call.

        Sandboxes are the running sandhub containers that are not idle warm-pool members: an
        idle member is capacity on hand, not load, so it is counted apart (in details) and
        not in the committed figures. A claimed member is a sandbox like any other, but its
        limit labels are the pool's (labels are fixed at creation and a claim changes the
        limits), so its limits come from an inspect: one per claimed member, none otherwise.
        """
        try:
            api = self.engine.api()
            api.ping()
            info = api.info()
            running = api.containers(filters={"label": f"{LABEL_MANAGED}=1", "status": "running"})
            sandboxes = [c for c in running if not idle_pool_member(c)]
            idle = [c for c in running if idle_pool_member(c)]
            memory, nano_cpus = self._committed(sandboxes)
            idle_memory, idle_nano_cpus = self._committed(idle)
        except Exception as exc:  # a probe reports, it never raises
            return ProbeResult(healthy=False, error=str(exc) or type(exc).__name__)
        mem_total = int(info.get("MemTotal") or 0)
        ncpu = int(info.get("NCPU") or 0)
        return ProbeResult(
            healthy=True,
            cpu_percent=min(100.0, nano_cpus / (ncpu * 1e9) * 100) if ncpu else None,
            memory_percent=min(100.0, memory / mem_total * 100) if mem_total else None,
            gpu_percent=None,
            sandboxes_running=len(sandboxes),
            details={
                "server_version": info.get("ServerVersion", ""),
                "ncpu": ncpu,
                "mem_total_bytes": mem_total,
                "memory_committed_bytes": memory,
                "cpus_committed": nano_cpus / 1e9,
                "pool_idle": len(idle),
                "pool_memory_bytes": idle_memory,
                "pool_cpus": idle_nano_cpus / 1e9,
                "containers_running": info.get("ContainersRunning", 0),
                "cgroup_version": info.get("CgroupVersion", ""),
            },
        )

    def _committed(self, containers: list[dict[str, Any]]) -> tuple[int, int]:
        """Sum of memory and cpu limits: from the labels where they still hold, else inspect.

        Labels hold for a container made for its sandbox or an idle pool member; a claimed
        pool member, or a container without them, is inspected.
        """
        memory = nano_cpus = 0
        for summary in containers:
            labels = summary.get("Labels") or {}
            if (
                LABEL_MEMORY in labels
                and LABEL_NANO_CPUS in labels
                and not claimed_pool_member(summary)
            ):
                memory += int(labels[LABEL_MEMORY])
                nano_cpus += int(labels[LABEL_NANO_CPUS])
                continue
            with contextlib.suppress(docker.errors.NotFound):  # removed since the list
                config = self.engine.api().inspect_container(summary["Id"])["HostConfig"]
                memory += int(config.get("Memory") or 0)
                nano_cpus += int(config.get("NanoCpus") or 0)
        return memory, nano_cpus

    def probe_gpu(self) -> float | None:
        """Mean GPU use from nvidia-smi, only for an engine on this machine (unix socket).

        A remote engine's GPUs would need an agent there; the host option gpu_probe=false
        turns it off.
        """
        host = self.engine.host
        if not host.options.get("gpu_probe", True) or not host.endpoint.startswith("unix://"):
            return None
        if shutil.which(_GPU_QUERY[0]) is None:
            return None
        try:
            output = subprocess.run(
                _GPU_QUERY, capture_output=True, text=True, timeout=_GPU_TIMEOUT, check=True
            ).stdout
            values = [float(line) for line in output.split() if line.strip()]
        except (OSError, subprocess.SubprocessError, ValueError):
            logger.warning("nvidia-smi failed on host %s", host, exc_info=True)
            return None
        return sum(values) / len(values) if values else None
