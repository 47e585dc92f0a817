"""The Docker side of the warm pool and of reconciliation, as a mixin DockerBackend inherits.

Warm pool. A pool member is made by the ordinary `provision` path, so it gets exactly the
isolation of any sandbox (uid 1000, no capabilities, no-new-privileges, read-only root, tmpfs,
its own named volume, no network), under a pool id (`wp_...`) in place of a sandbox id and
with the label org.sandhub.pool=1. Claiming it for a sandbox:

- applies the sandbox's memory (and the same swap limit, i.e. none), cpu and pids limits with
  the engine's update API, on the running container (~15 ms);
- renames the container to `sandhub-<sandbox id>`, so operators find it under the usual name.

Labels cannot change after creation, so a claimed container keeps org.sandhub.sandbox=<pool id>
and its volume stays `sandhub-<pool id>`. The platform ties the pool id to the sandbox in its
database (sandboxes.models.WarmContainer), and the sandbox's backend_state names the container
by id and the volume by name, so destroy() removes both. Env is not baked in: the services
pass a sandbox's env on every exec.

The memory and cpu labels a probe reads (org.sandhub.memory_bytes, ...) keep the pool's
profile after a claim; the pool profile is the default sandbox size, so they are exact for
sandboxes of the default size.

Reconciliation. `list_managed` lists every container and volume labelled
org.sandhub.managed=1 with its creation time, its deployment (org.sandhub.instance) and the
state that destroy() needs to remove exactly that one.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
from dataclasses import replace
from datetime import datetime
from typing import Any

import docker
import docker.errors

from hosts.backends.base import (
    LABEL_INSTANCE,
    LABEL_POOL,
    ManagedResource,
    SandboxGone,
    SandboxSpec,
    Unsupported,
)

logger = logging.getLogger(__name__)

_LABEL_MANAGED = "org.sandhub.managed"
_LABEL_SANDBOX = "org.sandhub.sandbox"
_NAME_PREFIX = "sandhub-"
_GPU_QUERY = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
_GPU_TIMEOUT = 5.0


class DockerPoolMixin:
    """Needs DockerBackend's `provision`, `_api`, `_engine` and `host` (it is mixed into it)."""

    # --- warm pool ---------------------------------------------------------------------------
    def provision_pool_member(self, spec: SandboxSpec) -> dict[str, Any]:
        if spec.network:
            # Network mode is fixed at creation; a team that wants network gets a fresh one.
            raise Unsupported("warm-pool members are created without network")
        labels = {**spec.labels, LABEL_POOL: "1"}
        state = self.provision(replace(spec, labels=labels))  # type: ignore[attr-defined]
        return {**state, "pool_id": spec.sandbox_id}

    def claim_pool_member(self, state: dict[str, Any], spec: SandboxSpec) -> dict[str, Any]:
        if spec.network:
            raise Unsupported("a warm-pool member has no network; provision afresh")
        container = state.get("container_id") or ""
        if not container:
            raise SandboxGone("the pool member has no container recorded")
        api: docker.APIClient = self._api()  # type: ignore[attr-defined]
        name = _NAME_PREFIX + spec.sandbox_id
        with self._engine(f"claiming warm container {container[:12]}"):  # type: ignore[attr-defined]
            try:
                self._update_limits(api, container, spec)
                api.rename(container, name)
                running = api.inspect_container(container)["State"]["Status"] == "running"
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"warm container {container[:12]} no longer exists") from exc
        if not running:
            raise SandboxGone(f"warm container {container[:12]} is not running")
        return {
            "container_id": container,
            "container_name": name,
            "volume": state.get("volume", ""),
            "pool_id": state.get("pool_id", ""),
        }

    def _update_limits(self, api: docker.APIClient, container: str, spec: SandboxSpec) -> None:
        # The SDK's update_container() knows neither NanoCpus nor PidsLimit; the engine's
        # update endpoint does (API 1.25+), so post it directly. MemorySwap equal to Memory:
        # no swap, as at creation; setting both together lets memory grow past the old swap.
        memory = spec.memory_mb * 1024 * 1024
        body = {
            "Memory": memory,
            "MemorySwap": memory,
            "NanoCpus": int(spec.cpus * 1_000_000_000),
            "PidsLimit": spec.pids_limit,
        }
        response = api._post_json(api._url("/containers/{0}/update", container), data=body)
        api._raise_for_status(response)
        # The engine refuses limits it cannot set (an error, raised above); it only warns
        # about what it also only warns about at creation (e.g. no swap accounting), so a
        # claimed sandbox holds exactly the limits a freshly made one would.
        for warning in (response.json() or {}).get("Warnings") or []:
            logger.warning("updating the limits of %s: %s", container[:12], warning)

    # --- reconciliation ----------------------------------------------------------------------
    def list_managed(self) -> list[ManagedResource]:
        api: docker.APIClient = self._api()  # type: ignore[attr-defined]
        selector = {"label": f"{_LABEL_MANAGED}=1"}
        with self._engine("listing sandhub containers and volumes"):  # type: ignore[attr-defined]
            containers = api.containers(all=True, filters=selector)
            volumes = api.volumes(filters=selector).get("Volumes") or []
        found = [_container_resource(c) for c in containers]
        found += [_volume_resource(v) for v in volumes]
        return [r for r in found if r.label_id]

    # --- host --------------------------------------------------------------------------------
    def probe_gpu(self) -> float | None:
        """Mean GPU use from nvidia-smi, only for an engine on this machine (unix socket).

        A remote engine's GPUs would need an agent there; the host option gpu_probe=false
        turns it off.
        """
        host = self.host  # type: ignore[attr-defined]
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


def _container_resource(summary: dict[str, Any]) -> ManagedResource:
    labels = summary.get("Labels") or {}
    names = summary.get("Names") or [""]
    return ManagedResource(
        kind="container",
        label_id=labels.get(_LABEL_SANDBOX, ""),
        name=names[0].lstrip("/"),
        created_at=float(summary["Created"]) if summary.get("Created") else None,
        instance=labels.get(LABEL_INSTANCE, ""),
        pool=labels.get(LABEL_POOL) == "1",
        running=summary.get("State") == "running",
        state={"container_id": summary["Id"]},
    )


def _volume_resource(summary: dict[str, Any]) -> ManagedResource:
    labels = summary.get("Labels") or {}
    created = None
    with contextlib.suppress(KeyError, TypeError, ValueError):
        created = datetime.fromisoformat(summary["CreatedAt"]).timestamp()
    return ManagedResource(
        kind="volume",
        label_id=labels.get(_LABEL_SANDBOX, ""),
        name=summary.get("Name", ""),
        created_at=created,
        instance=labels.get(LABEL_INSTANCE, ""),
        pool=labels.get(LABEL_POOL) == "1",
        state={"volume": summary.get("Name", "")},
    )
