"""The sandbox agent in Docker sandboxes: its transport (one exec each) and what failures mean.

The agent (hosts/backends/agent/) runs as the sandbox user in ONE long-lived exec with stdin
attached: `python3 -I -u -c BOOTSTRAP` (protocol.start_argv: the image's execute-only copy of
python3 when it has one, so the agent is never open to the sandbox's processes), its source
sent over that stdin. Nothing of the agent is baked into the image and nothing listens on a
port. The exec's hijacked connection is the
transport; the engine multiplexes the exec's stdout and stderr on it (tty off), in frames
(ExecStream takes them apart): stdout carries the agent's frames, stderr its diagnostics.

The link itself (one client per container, restarts, retries) is agent/link.py's, shared by
every kind; DockerAgentPlace supplies the start and the checks. An image without python3
raises AgentUnavailable (the backend uses the per-command path); a stream that broke because
the container went away raises SandboxGone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import docker.errors
import requests

from hosts.backends.agent.client import AgentClient, AgentStartFailed, AgentUnavailable
from hosts.backends.agent.link import AgentLink, Started
from hosts.backends.agent.protocol import start_argv
from hosts.backends.base import BackendError, SandboxGone
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import (
    SANDBOX_USER,
    WORKSPACE,
    container_ref,
    jobs_dir,
    names,
)
from hosts.backends.docker.stream import ExecStream

__all__ = ["DockerAgentPlace", "DockerTransport", "agent_link"]

_STDERR_KEEP = 8192
_UNREACHABLE = "unreachable"  # _status: the engine refused or dropped the connection
# What the engine says when the exec's program is missing (on the exec's stdout).
# The engine's words for a missing /bin/sh, and dash's for a missing python3.
_MISSING = ("executable file not found", "no such file or directory", ": not found")


class DockerTransport:
    """The hijacked connection of an exec with stdin: writes go to the exec's stdin, reads are
    the exec's stdout with the engine's stream frames taken off (stderr is kept aside)."""

    def __init__(self, sock: Any) -> None:
        self._stream = ExecStream(sock)
        self._stream.timed.settimeout(None)  # an idle agent is fine: calls keep deadlines
        self._stderr = bytearray()

    def recv(self) -> bytes:
        while True:
            data = self._stream.read()
            if not data:
                return b""
            out = bytearray()
            for kind, piece in self._stream.split(data):
                if kind == 2:
                    self._stderr += piece
                    del self._stderr[:-_STDERR_KEEP]
                else:
                    out += piece
            if out:
                return bytes(out)

    def sendall(self, data: bytes) -> None:
        self._stream.timed.sendall(data)

    def close(self) -> None:
        # shutdown first (in ExecStream.close): it ends a recv() blocked in the reader
        # thread, and the engine closes the agent's stdin (it then stops its commands).
        self._stream.close()

    def said(self) -> str:
        return self._stderr.decode("utf-8", "replace").strip()


class DockerAgentPlace:
    """How agents start in one engine's containers, and what their failures mean."""

    def __init__(
        self,
        engine: Engine,
        *,
        python: str = "python3",
        revive: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.engine = engine
        self.python = python
        # Starts a sandbox's container that its engine stopped (True when it did): the
        # backend's, since a start mounts the disk and puts the network rules back.
        self.revive = revive

    def key(self, state: dict[str, Any]) -> str | None:
        container, _ = names(state)
        return container or None

    def start(self, state: dict[str, Any]) -> Started:
        container = container_ref(state)
        api = self.engine.api()
        with self.engine.errors("starting the sandbox agent"):
            try:
                exec_id = self._create_exec(container)
            except _NotRunning as exc:
                # Its engine stopped it (restarted without live-restore, and the restart
                # policy could not start it again): started as the policy would have.
                if self.revive is None or not self.revive(state):
                    raise BackendError(f"sandbox container {container} is not running") from exc
                try:
                    exec_id = self._create_exec(container)
                except _NotRunning as again:
                    raise BackendError(f"sandbox container {container} is not running") from again
            sock = api.exec_start(exec_id, socket=True)
        try:
            return Started(AgentClient(DockerTransport(sock), label=container[:12]))
        except AgentStartFailed as exc:
            said = f"{exc.early.decode('utf-8', 'replace')} {exc.said}".strip()
            if any(text in said.lower() for text in _MISSING) or "SyntaxError" in said:
                raise AgentUnavailable(
                    f"the sandbox agent cannot run in {container}: the image has no usable "
                    f"{self.python} ({said[-300:]})"
                ) from exc
            self.after_broken(state, None)
            raise

    def _create_exec(self, container: str) -> str:
        try:
            return str(
                self.engine.api().exec_create(
                    container,
                    start_argv(self.python),
                    stdin=True,
                    stdout=True,
                    stderr=True,
                    tty=False,
                    user=SANDBOX_USER,
                    workdir="/",
                )["Id"]
            )
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"sandbox container {container} no longer exists") from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # stopped, or paused
                raise _NotRunning(container) from exc
            raise

    def after_broken(self, state: dict[str, Any], context: Any) -> None:
        """SandboxGone if the container is gone or going (a forced removal kills it first,
        so the stream may break a moment before it is gone)."""
        container = container_ref(state)
        give_up, looks = time.monotonic() + 2.0, 0
        while True:
            looks += 1
            status = self._status(container)
            if status == _UNREACHABLE:
                raise BackendError(
                    f"the docker engine of host {self.engine.host} stopped answering during the "
                    "call (restarted, or down): the sandbox's processes ended with its container"
                )
            if status in (None, _UNREACHABLE):
                return  # the engine cannot say: the caller's own error stands
            if status == "running" and looks > 1:  # twice: a kill may not show at once
                return
            if time.monotonic() > give_up:
                raise BackendError(
                    f"sandbox container {container} is not running ({status}): stopped under "
                    "the call (its engine restarting?)"
                )
            time.sleep(0.1)

    def after_missing(self, state: dict[str, Any]) -> None:
        """One look: a missing path in a container that is there is just a missing path."""
        self._status(container_ref(state))

    def _status(self, container: str) -> str | None:
        """The container's status; SandboxGone if it is gone or being removed."""
        try:
            info = self.engine.api().inspect_container(container)
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"sandbox container {container} no longer exists") from exc
        except requests.ConnectionError:
            return _UNREACHABLE
        except Exception:
            return None
        status = info.get("State", {}).get("Status")
        if status in ("removing", "dead"):
            raise SandboxGone(f"sandbox container {container} is being removed")
        return status

    # Paths and environment are the container's own: /workspace is /workspace.
    def host_path(self, state: dict[str, Any], path: str) -> str:
        return path

    def sandbox_path(self, state: dict[str, Any], path: str) -> str:
        return path

    def environment(self, state: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
        return env

    def write_root(self, state: dict[str, Any]) -> str:
        return WORKSPACE

    def job_dir(self, state: dict[str, Any], job_id: str) -> str:
        return f"{jobs_dir(state)}/{job_id}"


class _NotRunning(Exception):
    """The engine refused an exec: the container is stopped or paused."""


def agent_link(engine: Engine, *, python: str = "python3") -> AgentLink:
    """The agents of one engine's sandboxes (no limit on how many: an exec is no session)."""
    return AgentLink(DockerAgentPlace(engine, python=python))
