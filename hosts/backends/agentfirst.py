"""AgentFirstBackend: commands, listings, jobs, sync and ports through the sandbox agent where
it can run, and over the per-command path where it cannot, for every kind of host.

A kind composes its own parts (provisioning, tar streams, probes) and sets four attributes:
`agents` (agent/link.py, with the kind's AgentPlace), `agent_jobs` (agent/jobs.py), `plain`
and `plain_jobs` (fallback/, on the kind's exec primitive). The choice between the two paths
is made here, once:

- the agent is used unless SANDHUB_AGENT or the host's option `agent` turns it off (read on
  each call, so a changed Host row or setting applies at once);
- a sandbox that cannot run it (no python3: AgentUnavailable, remembered by the link for a
  while) uses the per-command path, which reads and cancels jobs either path started;
- a one-off command (`once`) costs one exec on the per-command path, while starting an agent
  for it costs that, a python3 start and a handshake for nothing: it uses the agent only if
  one runs already;
- stdin has the per-command path's limit on both paths, so a caller sees the same answer
  whichever runs the command;
- terminals and shell sessions need the agent (agentinteractive.py): without it, Unsupported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from typing_extensions import Unpack

from hosts.backends import syncscripts
from hosts.backends.agent import synccalls
from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink
from hosts.backends.agentinteractive import AgentInteractive
from hosts.backends.agentusage import AgentUsage
from hosts.backends.base import (
    ExecResult,
    FileEntry,
    JobStatus,
    ManifestPage,
    PortStream,
    SandboxBackend,
    Unsupported,
)
from hosts.backends.fallback import commands as plain_commands
from hosts.backends.fallback.commands import PlainCommands
from hosts.backends.fallback.jobs import PlainJobs
from hosts.backends.options import CommandOptions, JobOptions

__all__ = ["AgentFirstBackend"]

T = TypeVar("T")

LIVE_ALL = 1 << 62  # live output budget of a command through the agent: every byte, no sampling


class AgentFirstBackend(AgentUsage, AgentInteractive, SandboxBackend):
    agents: AgentLink
    agent_jobs: AgentJobs
    plain: PlainCommands
    plain_jobs: PlainJobs

    def agent_on(self) -> bool:
        """Whether calls go through the sandbox agent: the setting, then the host's option."""
        if not getattr(settings, "SANDHUB_AGENT", True):
            return False
        return bool(self.host.options.get("agent", True))

    def _either(self, agent: Callable[[], T], plain: Callable[[], T]) -> T:
        """agent() if the agent is on and can run in the sandbox, else plain()."""
        if self.agent_on():
            try:
                return agent()
            except AgentUnavailable:
                pass
        return plain()

    def command_argv(self, state: dict[str, Any], argv: list[str]) -> list[str]:
        """argv as the sandbox's processes must see it (a kind whose paths differ maps them)."""
        return argv

    # --- agents kept ahead of use (warm-pool members: sandboxes/housekeeping/poolagents.py) ----
    def keep_agent(self, state: dict[str, Any]) -> bool:
        if not self.agent_on():
            return False
        try:
            self.agents.client(state)
        except AgentUnavailable:
            return False
        return True

    def has_agent(self, state: dict[str, Any]) -> bool:
        return self.agents.running(state)

    def drop_agent(self, state: dict[str, Any]) -> None:
        self.agents.forget(state)

    # --- commands ----------------------------------------------------------------------------
    def exec(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        once: bool = False,
        **options: Unpack[CommandOptions],
    ) -> ExecResult:
        argv = self.command_argv(state, argv)
        stdin = options.get("stdin")
        limit = self.plain.primitive.max_stdin
        if isinstance(stdin, bytes) and limit is not None and len(stdin) > limit:
            return self.plain.exec(state, argv, **options)  # which refuses it, saying why
        if not once or self.agents.running(state):
            # Every byte live, as the per-command path streams it (the callers' pumps keep
            # what they show bounded), and the same caller's deadline.
            grace = plain_commands.CLIENT_GRACE
            return self._either(
                lambda: self.agents.exec(state, argv, live_limit=LIVE_ALL, grace=grace, **options),
                lambda: self.plain.exec(state, argv, **options),
            )
        return self.plain.exec(state, argv, **options)

    def kill_command(self, state: dict[str, Any], marker: str) -> None:
        # Both paths mark a command's processes the same way (MARKER_ENV): either one finds
        # a command the other started.
        self._either(
            lambda: self.agents.kill_command(state, marker),
            lambda: self.plain.kill_marked(state, marker),
        )

    def start_background(
        self, state: dict[str, Any], argv: list[str], **options: Unpack[JobOptions]
    ) -> dict[str, Any]:
        return self._either(
            lambda: self.agent_jobs.start_background(state, argv, **options),
            lambda: self.plain_jobs.start_background(state, argv, **options),
        )

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        # Either path reads a job either path started: the same files, the same scripts.
        return self._either(
            lambda: self.agent_jobs.poll_background(state, job, tail_bytes),
            lambda: self.plain_jobs.poll_background(state, job, tail_bytes),
        )

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        # From the running agent where there is one: an exec cannot start while a fork bomb
        # holds the sandbox's pids and memory.
        self._either(
            lambda: self.agent_jobs.cancel_background(state, job),
            lambda: self.plain_jobs.cancel_background(state, job),
        )

    # --- files and sync ----------------------------------------------------------------------
    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        return self._either(
            lambda: self.agents.list_dir(state, path),
            lambda: self.plain.list_dir(state, path),
        )

    def manifest(
        self, state: dict[str, Any], root: str, *, after: str | None, limit: int
    ) -> ManifestPage:
        host_root, top = self._sync_root(state, root)
        return self._either(
            lambda: self.agents.idempotent(
                state,
                lambda c: synccalls.manifest(c, host_root, top=top, after=after, limit=limit),
            ),
            lambda: syncscripts.manifest_by_exec(
                self.plain.sync_runner(state), host_root, top, after=after, limit=limit
            ),
        )

    def delete_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> int:
        if not paths:
            return 0
        host_root, top = self._sync_root(state, root)
        names = syncscripts.names_blob(paths)
        return self._either(
            # Tried again on a new agent if the stream broke: removing twice is harmless.
            lambda: self.agents.idempotent(
                state, lambda c: synccalls.remove(c, host_root, names, top=top)
            ),
            lambda: syncscripts.delete_by_exec(
                self.plain.sync_runner(state), host_root, top, paths
            ),
        )

    def _sync_root(self, state: dict[str, Any], root: str) -> tuple[str, str]:
        """The root and /workspace as the host has them: the root is reached from there
        without following a link (syncscripts.py, agent/inside/sync.py)."""
        place = self.agents.place
        return place.host_path(state, root), place.host_path(state, syncscripts.WORKSPACE)

    # --- ports -------------------------------------------------------------------------------
    def open_port(self, state: dict[str, Any], port: int, timeout: float = 5.0) -> PortStream:
        # Through the agent whatever the agent setting says: it is the one way into a sandbox
        # without network that carries a byte stream both ways with flow control, and it
        # checks that the listener is the sandbox user's own.
        try:
            return self.agents.open_port(state, port, timeout)
        except AgentUnavailable as exc:
            return self.open_port_without_agent(state, port, timeout, exc)

    def open_port_without_agent(
        self, state: dict[str, Any], port: int, timeout: float, why: AgentUnavailable
    ) -> PortStream:
        raise Unsupported(
            f"previews need python3 in the sandbox (the sandbox agent carries them): {why}"
        )
