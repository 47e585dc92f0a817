"""Pause, resume, stop and start of sandbox containers: the engine's own operations.

- pause / resume: the engine's pause and unpause (the cgroup freezer): every process stops
  where it is and keeps its memory; the sandbox agent's stream stays open, its calls wait.
- stop: the engine's stop (SIGTERM to the container's init, SIGKILL after STOP_GRACE
  seconds); a paused container is thawed first, so its processes can take the signal. The
  writable layer, the volume, the disk and the network stay; the restart policy
  (unless-stopped) keeps a stopped container stopped across an engine restart.
- start: the disk mounted again (it stays mounted across a stop, but not across a reboot
  of the machine), the network's host rules put back (idempotent; a reboot or a flush
  removes them), then the engine's start, checked as provision checks it.

The engine answers these in ~10-40 ms (pause, unpause) and ~0.3-1 s (stop, start) on the
development machine; inspect is called only where the engine's own answer is ambiguous.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors

from hosts.backends.base import SandboxGone
from hosts.backends.docker import container_egress
from hosts.backends.docker.containers import Containers
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import container_ref, names, network_name

STOP_GRACE = 3  # seconds between SIGTERM and SIGKILL on stop


class States:
    """Pause, resume, stop and start on one engine."""

    def __init__(self, engine: Engine, containers: Containers) -> None:
        self.engine = engine
        self.containers = containers

    def pause(self, state: dict[str, Any]) -> None:
        container = container_ref(state)
        with self._errors("pausing", container):
            try:
                self.engine.api().pause(container)
            except docker.errors.NotFound:
                raise
            except docker.errors.APIError:
                # "already paused" (a 500 on engine 20.10) is done; anything else (stopped,
                # being removed) stands, in the engine's words.
                if self._status(container) != "paused":
                    raise

    def resume(self, state: dict[str, Any]) -> None:
        container = container_ref(state)
        with self._errors("resuming", container):
            try:
                self.engine.api().unpause(container)
            except docker.errors.NotFound:
                raise
            except docker.errors.APIError:
                if self._status(container) != "running":  # "not paused": running is done
                    raise

    def stop(self, state: dict[str, Any]) -> None:
        container = container_ref(state)
        with self._errors("stopping", container):
            api = self.engine.api()
            if self._status(container) == "paused":
                api.unpause(container)  # a frozen process takes no signal
            api.stop(container, timeout=STOP_GRACE)

    def start(self, state: dict[str, Any]) -> None:
        container = container_ref(state)
        _, volume = names(state)
        network = network_name(state)
        with self._errors("starting", container):
            if state.get("disk_mb") and self.containers.disks.enabled:
                self.containers.disks.ensure_mounted(state.get("disk") or volume)
            if network and self.containers.networks.firewall:
                self.containers.networks.install_rules(network)
            found = self.engine.client().containers.get(container)
            if found.status != "running":
                found.start()
            self.containers.check_started(found)
            if network:
                container_egress.refresh_address(state, found, network)

    def status(self, container: str) -> str:
        """running, paused, stopped (any other state of a container that is there), missing."""
        with self.engine.errors("inspecting sandbox"):
            try:
                return self._status(container)
            except SandboxGone:
                return "missing"

    def _status(self, container: str) -> str:
        try:
            info = self.engine.api().inspect_container(container)
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"sandbox container {container} no longer exists") from exc
        status = info.get("State", {}).get("Status")
        if status in ("removing", "dead"):
            raise SandboxGone(f"sandbox container {container} is being removed")
        return status if status in ("running", "paused") else "stopped"

    @contextlib.contextmanager
    def _errors(self, doing: str, container: str) -> Iterator[None]:
        """engine.errors, with the engine's "no such container" as SandboxGone."""
        with self.engine.errors(f"{doing} sandbox container {container}"):
            try:
                yield
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"sandbox container {container} no longer exists") from exc
