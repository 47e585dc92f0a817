"""Sandboxes as Docker containers, driven through the docker SDK over the host's endpoint.

DockerBackend is an AgentFirstBackend (agentfirst.py: agent or per-command path, chosen once
for every kind) composed of one helper per responsibility, all sharing one Engine (the
connection to the host's engine):

- names:      container and volume names, labels, the sandbox user;
- engine:     the client (TLS material from the host's credential) and error mapping;
- containers: create with the sandbox's isolation, status, destroy, list for reconciliation;
- network:    a network of its own for a sandbox with network, routed by host rules to the
              egress proxy only (network_rules.py; container_egress.py, trust.py);
- disk:       a /workspace of the sandbox's disk size (loop-mounted ext4, local engine);
- agent:      the sandbox agent's transport (one long-lived exec per sandbox) and checks;
              agent/link.py and agent/jobs.py run commands, listings and background jobs
              through it, as for every kind, without an engine exec each;
- plain:      the engine exec, the one primitive of the per-command path (fallback/: where
              the agent is off, or the image has no python3 to run it);
- stream:     an exec's hijacked connection, its frames taken apart;
- files:      tar archives in and out, and of chosen entries (the local client's sync);
- probe:      health and committed load of the host, GPU use;
- pool:       warm-pool members and their claim;
- states:     pause, resume, stop and start (the engine's own, disk and fences kept).
- snapshots:  a sandbox's workspace and home kept on this machine (snapshot_store), a
              sandbox started from them, moved between hosts as a tar stream.

Measured on the development machine (engine 20.10, cgroup v1): exec of `true` ~45 ms,
provision ~170 ms, destroy ~45 ms.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink
from hosts.backends.agentfirst import AgentFirstBackend
from hosts.backends.base import (
    CONSUMED_BY_ONE,
    BackendError,
    ManagedResource,
    PortStream,
    ProbeResult,
    SandboxSpec,
    SnapshotTaken,
    Unsupported,
)
from hosts.backends.docker.agent import DockerAgentPlace
from hosts.backends.docker.containers import Containers
from hosts.backends.docker.disk import DEFAULT_DISK_MB
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.files import Files
from hosts.backends.docker.names import names
from hosts.backends.docker.plain import DockerPlainExec
from hosts.backends.docker.pool import Pool
from hosts.backends.docker.probe import Prober
from hosts.backends.docker.snapshots import Snapshots
from hosts.backends.docker.states import States
from hosts.backends.docker.usage import engine_usage
from hosts.backends.fallback.commands import PlainCommands
from hosts.backends.fallback.jobs import PlainJobs

if TYPE_CHECKING:
    from hosts.models import Host

__all__ = ["DockerBackend"]

logger = logging.getLogger(__name__)


class DockerBackend(AgentFirstBackend):
    kind = "docker"

    def __init__(self, host: Host) -> None:
        # Before the base class sets self.host, which is stored on the engine (see `host`).
        self.engine = Engine(host)
        super().__init__(host)
        self.containers = Containers(self.engine)
        self.place = DockerAgentPlace(self.engine, revive=self._revive)
        self.agents = AgentLink(self.place)
        self.agent_jobs = AgentJobs(self.agents)
        self.plain = PlainCommands(DockerPlainExec(self.engine, self._revive), self.place)
        self.plain_jobs = PlainJobs(self.plain)
        self.files = Files(self.engine, self.plain)
        self.prober = Prober(self.engine)
        self.pool = Pool(self.engine, self.containers)
        self.states = States(self.engine, self.containers)
        self.snapshots = Snapshots(self.engine, self.containers, self.files)
        self._stopping: set[str] = set()  # containers this process is stopping: not revived

    # The registry hands a cached backend the caller's fresh Host row (flags, options): kept on
    # the engine, every helper reads that one.
    @property
    def host(self) -> Host:
        return self.engine.host

    @host.setter
    def host(self, host: Host) -> None:
        self.engine.host = host

    def close(self) -> None:
        # The agents' streams first: they are hijacked connections of the engine's client.
        self.agents.close()
        self.engine.close()

    # --- lifecycle ---------------------------------------------------------------------------
    def provision(self, spec: SandboxSpec) -> dict[str, Any]:
        state = self.containers.provision(
            spec,
            disk_source=self.snapshots.disk_source(spec),
            move_source=bool(spec.snapshot and spec.snapshot.get(CONSUMED_BY_ONE)),
        )
        if spec.snapshot:
            try:
                self.snapshots.restore(state, spec.snapshot)
            except BaseException:
                with contextlib.suppress(BackendError):
                    self.destroy(state)
                raise
        return state

    def destroy(self, state: dict[str, Any]) -> None:
        # The agent dies with its container; forgetting it first spares its stream's reader
        # a broken-stream round (and a lookup for a container that is going).
        self.agents.forget(state)
        self._stopping.discard(names(state)[0])
        self.containers.destroy(state)

    def status(self, state: dict[str, Any]) -> str:
        container, _ = names(state)
        return self.states.status(container) if container else "missing"

    def pause(self, state: dict[str, Any]) -> None:
        self.states.pause(state)

    def resume(self, state: dict[str, Any]) -> None:
        self.states.resume(state)

    def stop(self, state: dict[str, Any]) -> None:
        # Its agent dies with its processes: forgotten, so the next call starts a new one
        # rather than finding the old stream broken.
        self.agents.forget(state)
        container, _ = names(state)
        self._stopping.add(container)
        self.states.stop(state)

    def start(self, state: dict[str, Any]) -> None:
        self.agents.forget(state)
        self._stopping.discard(names(state)[0])
        self.states.start(state)

    def _revive(self, state: dict[str, Any]) -> bool:
        """Start the container of a sandbox the platform runs that its engine stopped (an
        engine restarted without live-restore whose restart policy did not bring it back, a
        reboot with the disk not yet mounted): what the restart policy would have done, with
        the disk mounted and the network rules put back. Not one this process is stopping."""
        container, _ = names(state)
        if not container or container in self._stopping:
            return False
        if self.states.status(container) != "stopped":  # paused: the platform's to resume
            return False
        logger.warning(
            "sandbox container %s on host %s was stopped by its engine; starting it again",
            container,
            self.host,
        )
        self.states.start(state)
        return True

    # --- files -------------------------------------------------------------------------------
    def put_files(
        self, state: dict[str, Any], dest_dir: str, tar_stream: bytes | IO[bytes]
    ) -> None:
        self.files.put_files(state, dest_dir, tar_stream)

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        return self.files.get_files(state, path)

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        return self.files.get_entries(state, root, paths)

    def open_port_without_agent(
        self, state: dict[str, Any], port: int, timeout: float, why: AgentUnavailable
    ) -> PortStream:
        raise Unsupported(
            f"previews need python3 in the sandbox's image (the sandbox agent carries them): {why}"
        )

    # --- host --------------------------------------------------------------------------------
    def usage_from_host(self, state: dict[str, Any]) -> dict[str, Any]:
        return engine_usage(self.engine, state)

    def probe(self) -> ProbeResult:
        result = self.prober.probe()
        if not result.healthy:
            return result
        return replace(result, details={**result.details, **self._ensure_local_guards()})

    def _ensure_local_guards(self) -> dict[str, str]:
        """Put back what a reboot or a flush removed (sandbox network rules, disk mounts) and
        say how this host fences sandboxes in (docs/security.md)."""
        networks, disks = self.containers.networks, self.containers.disks
        details = {}
        try:
            if networks.firewall:
                count = networks.ensure_all()
                details["network_isolation"] = (
                    f"own network routed to the egress proxy only, host rules installed ({count})"
                )
            else:
                details["network_isolation"] = (
                    "host rules not installed by the platform (remote engine or "
                    "firewall=external): network sandboxes are refused, the egress proxy and "
                    "its firewall live on the platform's machine (docs/security.md)"
                )
        except BackendError as exc:
            logger.error("sandbox network rules on host %s: %s", self.host, exc)
            details["network_isolation"] = f"error: {exc}"
        try:
            if disks.enabled:
                count = disks.ensure_all()
                details["disk_limit"] = f"loop-mounted ext4 per sandbox ({count})"
            else:
                details["disk_limit"] = (
                    "none: /workspace is a plain volume (remote engine or disk_limit=false)"
                )
        except BackendError as exc:
            logger.error("sandbox disks on host %s: %s", self.host, exc)
            details["disk_limit"] = f"error: {exc}"
        return details

    def probe_gpu(self) -> float | None:
        return self.prober.probe_gpu()

    def list_sandbox_ids(self) -> Iterable[str]:
        return self.containers.list_sandbox_ids()

    def list_managed(self) -> list[ManagedResource]:
        return self.containers.list_managed() + self.snapshots.managed()

    # --- snapshots (snapshots.py) --------------------------------------------------------------
    def snapshot(
        self, state: dict[str, Any], snapshot_id: str, labels: dict[str, str]
    ) -> SnapshotTaken:
        return self.snapshots.take(state, snapshot_id, labels)

    def delete_snapshot(self, snapshot_state: dict[str, Any]) -> None:
        self.snapshots.delete(snapshot_state)

    def export_snapshot(self, snapshot_state: dict[str, Any]) -> Iterator[bytes]:
        return self.snapshots.export(snapshot_state)

    def import_snapshot(
        self, snapshot_id: str, labels: dict[str, str], chunks: Iterable[bytes]
    ) -> SnapshotTaken:
        return self.snapshots.import_(snapshot_id, labels, chunks)

    # --- warm pool ---------------------------------------------------------------------------
    def provision_pool_member(self, spec: SandboxSpec) -> dict[str, Any]:
        return self.pool.provision_pool_member(spec)

    def claim_pool_member(self, state: dict[str, Any], spec: SandboxSpec) -> dict[str, Any]:
        # A member's disk has the default size and cannot change while it runs: a sandbox
        # that wants another size is provisioned afresh (the caller discards the member).
        wanted = (spec.disk_mb or DEFAULT_DISK_MB) if self.containers.disks.enabled else None
        if state.get("disk_mb") != wanted:
            raise Unsupported(f"the warm-pool member's disk is not {wanted} MB; provision afresh")
        running = self.agents.running(state)  # kept by this process (poolagents.py)
        return {**self.pool.claim_pool_member(state, spec, running=running), "disk_mb": wanted}
