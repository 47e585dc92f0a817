"""The Docker side of the warm pool: ready, unowned containers, claimed by new sandboxes.

A pool member is made by the ordinary `provision` path, so it gets exactly the isolation of
any sandbox (uid 1000, no capabilities, no-new-privileges, read-only root, tmpfs, its own named
volume, no network), under a pool id (`wp_...`) in place of a sandbox id and with the label
org.sandhub.pool=1. Claiming it for a sandbox:

- applies the sandbox's memory (and the same swap limit, i.e. none), cpu and pids limits with
  the engine's update API, on the running container (~15 ms), unless the member already has
  exactly these (the usual case: members are made with the default limits) as its inspection
  shows;
- renames the container to `sandhub-<sandbox id>`, so operators find it under the usual name.

Labels cannot change after creation, so a claimed container keeps org.sandhub.sandbox=<pool id>
and its volume stays `sandhub-<pool id>`. The platform ties the pool id to the sandbox in its
database (sandboxes.models.WarmContainer), and the sandbox's backend_state names the container
by id and the volume by name, so destroy() removes both. Env is not baked in: the services
pass a sandbox's env on every exec.

The memory and cpu labels (org.sandhub.memory_bytes, ...) also keep the pool's profile after a
claim. The probe therefore trusts them only for idle members (counted apart, as capacity on
hand) and inspects a claimed member, which the rename gives away, for its real limits.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import docker
import docker.errors

from hosts.backends.base import LABEL_POOL, SandboxGone, SandboxSpec, Unsupported
from hosts.backends.docker.containers import Containers
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import NAME_PREFIX

logger = logging.getLogger(__name__)


class Pool:
    """Makes and claims warm-pool members on one engine."""

    def __init__(self, engine: Engine, containers: Containers) -> None:
        self.engine = engine
        self.containers = containers

    def provision_pool_member(self, spec: SandboxSpec) -> dict[str, Any]:
        if spec.network:
            # Network mode is fixed at creation; a team that wants network gets a fresh one.
            raise Unsupported("warm-pool members are created without network")
        labels = {**spec.labels, LABEL_POOL: "1"}
        state = self.containers.provision(replace(spec, labels=labels))
        return {**state, "pool_id": spec.sandbox_id, "limits": _limits(spec)}

    def claim_pool_member(
        self, state: dict[str, Any], spec: SandboxSpec, *, running: bool = False
    ) -> dict[str, Any]:
        """running: this process holds a live agent in the member (its exec stream open: the
        container runs), so the limits it was made with (in `state`) are all there is to know,
        without an inspection."""
        if spec.network:
            raise Unsupported("a warm-pool member has no network; provision afresh")
        container = state.get("container_id") or ""
        if not container:
            raise SandboxGone("the pool member has no container recorded")
        api = self.engine.api()
        name = NAME_PREFIX + spec.sandbox_id
        with self.engine.errors(f"claiming warm container {container[:12]}"):
            try:
                if running and state.get("limits"):
                    current = state["limits"]
                else:
                    info = api.inspect_container(container)
                    if info["State"]["Status"] != "running":
                        raise SandboxGone(f"warm container {container[:12]} is not running")
                    current = info["HostConfig"]
                wanted = _limits(spec)
                if any(current.get(key) != value for key, value in wanted.items()):
                    self._update_limits(api, container, wanted)
                api.rename(container, name)
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"warm container {container[:12]} no longer exists") from exc
        return {
            "container_id": container,
            "container_name": name,
            "volume": state.get("volume", ""),
            "pool_id": state.get("pool_id", ""),
            **({"jobs_dir": state["jobs_dir"]} if state.get("jobs_dir") else {}),
        }

    def _update_limits(self, api: docker.APIClient, container: str, body: dict[str, int]) -> None:
        # The SDK's update_container() knows neither NanoCpus nor PidsLimit; the engine's
        # update endpoint does (API 1.25+), so post it directly.
        response = api._post_json(api._url("/containers/{0}/update", container), data=body)
        api._raise_for_status(response)
        # The engine refuses limits it cannot set (an error, raised above); it only warns
        # about what it also only warns about at creation (e.g. no swap accounting), so a
        # claimed sandbox holds exactly the limits a freshly made one would.
        for warning in (response.json() or {}).get("Warnings") or []:
            logger.warning("updating the limits of %s: %s", container[:12], warning)


def _limits(spec: SandboxSpec) -> dict[str, int]:
    """The sandbox's limits as the engine's HostConfig holds them. MemorySwap equal to Memory:
    no swap, as at creation; setting both together lets memory grow past the old swap."""
    memory = spec.memory_mb * 1024 * 1024
    return {
        "Memory": memory,
        "MemorySwap": memory,
        "NanoCpus": int(spec.cpus * 1_000_000_000),
        "PidsLimit": spec.pids_limit,
    }
