"""Sandboxes as Docker containers, driven through the docker SDK over the host's endpoint.

DockerBackend implements the backend interface by composing one helper per responsibility,
all sharing one Engine (the connection to the host's engine):

- names:      container and volume names, labels, the sandbox user;
- engine:     the client (TLS material from the host's credential) and error mapping;
- containers: create with the sandbox's isolation, status, destroy, list for reconciliation;
- network:    a network of its own for a sandbox with network, fenced off by host rules;
- disk:       a /workspace of the sandbox's disk size (loop-mounted ext4, local engine);
- agent:      the sandbox agent's transport (one long-lived exec per sandbox) and checks;
              agent/link.py and agent/jobs.py run commands, listings and background jobs
              through it, as for every kind, without an engine exec each;
- exec:       commands through the wrapper in `scripts`, output read from the exec stream (the
              path when the agent is off, or the image has no python3 to run it);
- files:      tar archives in and out, directory listings;
- sync:       a tree's manifest, deletions and a tar of chosen entries (the local client);
- background: detached jobs that outlive the caller;
- probe:      health and committed load of the host, GPU use;
- pool:       warm-pool members and their claim.

Measured on the development machine (engine 20.10, cgroup v1): exec of `true` ~45 ms,
provision ~170 ms, destroy ~45 ms.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

from django.conf import settings

from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    JobStatus,
    ManagedResource,
    ManifestPage,
    OutputCallback,
    PortStream,
    ProbeResult,
    SandboxBackend,
    SandboxSpec,
    Unsupported,
)
from hosts.backends.docker import exec as per_command
from hosts.backends.docker.agent import agent_link
from hosts.backends.docker.background import Jobs
from hosts.backends.docker.containers import Containers
from hosts.backends.docker.disk import DEFAULT_DISK_MB
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.exec import MAX_STDIN_BYTES, Commands
from hosts.backends.docker.files import Files
from hosts.backends.docker.pool import Pool
from hosts.backends.docker.probe import Prober
from hosts.backends.docker.sync import TreeSync

if TYPE_CHECKING:
    from hosts.models import Host

__all__ = ["DockerBackend"]

logger = logging.getLogger(__name__)

LIVE_ALL = 1 << 62  # live output budget a stream through the agent: no sampling


class DockerBackend(SandboxBackend):
    kind = "docker"

    def __init__(self, host: Host) -> None:
        # Before the base class sets self.host, which is stored on the engine (see `host`).
        self.engine = Engine(host)
        super().__init__(host)
        self.containers = Containers(self.engine)
        self.commands = Commands(self.engine)
        self.files = Files(self.engine, self.commands)
        self.jobs = Jobs(self.commands)
        self.prober = Prober(self.engine)
        self.pool = Pool(self.engine, self.containers)
        self.agents = agent_link(self.engine)
        self.agent_jobs = AgentJobs(self.agents)
        self.sync = TreeSync(self.commands, self.files, self.agents, self._agent_on)

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

    def _agent_on(self) -> bool:
        """Whether commands go through the sandbox agent: the setting, then the host's option
        (read on each call, so a changed Host row or setting applies at once)."""
        if not getattr(settings, "SANDHUB_AGENT", True):
            return False
        return bool(self.host.options.get("agent", True))

    # --- lifecycle ---------------------------------------------------------------------------
    def provision(self, spec: SandboxSpec) -> dict[str, Any]:
        return self.containers.provision(spec)

    def destroy(self, state: dict[str, Any]) -> None:
        # The agent dies with its container; forgetting it first spares its stream's reader
        # a broken-stream round (and a lookup for a container that is going).
        self.agents.forget(state)
        self.containers.destroy(state)

    def status(self, state: dict[str, Any]) -> str:
        return self.containers.status(state)

    # --- commands ----------------------------------------------------------------------------
    def exec(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        stdin: bytes | None = None,
        once: bool = False,
    ) -> ExecResult:
        # A one-off command costs one engine exec; starting an agent for it costs that, a
        # python3 start and a handshake, for nothing (unless one runs already).
        if self._agent_on() and (not once or self.agents.running(state)):
            # The per-command path's stdin limit (it passes stdin in the environment) holds
            # here too, so a caller sees the same answer whichever path runs the command.
            if stdin is not None and len(stdin) > MAX_STDIN_BYTES:
                raise Unsupported(
                    f"stdin of {len(stdin)} bytes is over the docker backend's "
                    f"{MAX_STDIN_BYTES}-byte limit; upload a file and redirect from it instead"
                )
            try:
                return self.agents.exec(
                    state,
                    argv,
                    cwd=cwd,
                    env=env,
                    timeout=timeout,
                    output_cap=output_cap,
                    on_output=on_output,
                    stdin=stdin,
                    # Every byte live, as the per-command path streams it (the callers' pumps
                    # keep what they show bounded), and the same caller's deadline.
                    live_limit=LIVE_ALL,
                    grace=per_command._CLIENT_GRACE,
                )
            except AgentUnavailable:
                pass  # no python3 in the image: one engine exec per command, as before
        return self.commands.exec(
            state,
            argv,
            cwd=cwd,
            env=env,
            timeout=timeout,
            output_cap=output_cap,
            on_output=on_output,
            stdin=stdin,
        )

    def start_background(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        job_id: str,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        if self._agent_on():
            try:
                return self.agent_jobs.start_background(
                    state, argv, cwd=cwd, env=env, job_id=job_id, timeout=timeout
                )
            except AgentUnavailable:
                pass
        return self.jobs.start_background(
            state, argv, cwd=cwd, env=env, job_id=job_id, timeout=timeout
        )

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        return self.jobs.poll_background(state, job, tail_bytes)

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        if self._agent_on():
            try:
                return self.agent_jobs.cancel_background(state, job)
            except AgentUnavailable:
                pass
        self.jobs.cancel_background(state, job)

    # --- files -------------------------------------------------------------------------------
    def put_files(
        self, state: dict[str, Any], dest_dir: str, tar_stream: bytes | IO[bytes]
    ) -> None:
        self.files.put_files(state, dest_dir, tar_stream)

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        return self.files.get_files(state, path)

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        if self._agent_on():
            try:
                return self.agents.list_dir(state, path)
            except AgentUnavailable:
                pass
        return self.files.list_dir(state, path)

    def manifest(
        self, state: dict[str, Any], root: str, *, after: str | None, limit: int
    ) -> ManifestPage:
        return self.sync.manifest(state, root, after=after, limit=limit)

    def delete_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> int:
        return self.sync.delete_entries(state, root, paths)

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        return self.sync.get_entries(state, root, paths)

    # --- ports -------------------------------------------------------------------------------
    def open_port(self, state: dict[str, Any], port: int, timeout: float = 5.0) -> PortStream:
        # Through the agent whatever the agent setting says: it is the one way into a
        # sandbox without network that carries a byte stream both ways with flow control.
        try:
            return self.agents.open_port(state, port, timeout)
        except AgentUnavailable as exc:
            raise Unsupported(
                f"previews need python3 in the sandbox's image (the sandbox agent carries "
                f"them): {exc}"
            ) from exc

    # --- host --------------------------------------------------------------------------------
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
                details["network_isolation"] = f"own network, host rules installed ({count})"
            else:
                details["network_isolation"] = (
                    "own network; host rules not installed by the platform (remote engine or "
                    "firewall=external): see docs/security.md"
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
        return self.containers.list_managed()

    # --- warm pool ---------------------------------------------------------------------------
    def provision_pool_member(self, spec: SandboxSpec) -> dict[str, Any]:
        return self.pool.provision_pool_member(spec)

    def claim_pool_member(self, state: dict[str, Any], spec: SandboxSpec) -> dict[str, Any]:
        # A member's disk has the default size and cannot change while it runs: a sandbox
        # that wants another size is provisioned afresh (the caller discards the member).
        wanted = (spec.disk_mb or DEFAULT_DISK_MB) if self.containers.disks.enabled else None
        if state.get("disk_mb") != wanted:
            raise Unsupported(f"the warm-pool member's disk is not {wanted} MB; provision afresh")
        return {**self.pool.claim_pool_member(state, spec), "disk_mb": wanted}
