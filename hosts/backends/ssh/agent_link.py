"""The sandbox agent on SSH hosts: one channel each, on the host's pooled connection.

The agent (hosts/backends/agent/) runs as the sandbox (its user, its limits, a clean
environment: layout.as_sandbox) as the one exec of a session channel of its own:
`python3 -I -u -c BOOTSTRAP`, its source sent over the channel's stdin. Nothing is copied
onto the host and nothing listens on a port. ChannelTransport (transport.py) carries the
frames; many calls share the one channel at once.

SshAgentLink keeps one live AgentClient per sandbox (keyed by its directory) in this
process (agent_start.py starts them), one start per sandbox at a time, and a new one when
the last one's channel broke: its calls in flight fail with AgentBroken (a BackendError),
the next call gets a new agent. After a failure, one cheap look (`test -d` on the
connection) tells whether the sandbox's directory is gone (SandboxGone); a connection that
died under the agent is SshConnectionLost.

Paths: callers speak of /workspace; layout.host_path maps it to the sandbox's directory on
the host, layout.sandbox_path maps listings back. Every call's environment is
layout.sandbox_env (the sandbox's variables, the call's, and the fixed ones).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import IO, Any, TypeVar

from hosts.backends.agent.client import AgentBroken, AgentClient, AgentUnavailable, ExecCall
from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    OutputCallback,
    PortStream,
    SandboxGone,
)
from hosts.backends.ssh import layout
from hosts.backends.ssh.agent_start import StartFailed, lost, start_agent
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.errors import SshConnectionLost, SshError

__all__ = ["AgentUnavailable", "SshAgentLink"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

UNAVAILABLE_FOR = 300.0  # seconds a sandbox found without python3 is not asked again
GONE_CHECK_TIMEOUT = 10.0
INTERNAL_TIMEOUT = 60.0  # the platform's own scripts (job polls, upload checks)
# Live agents per link (per host, per process) before the least recently used idle one is
# closed to make room: sshd's MaxSessions (10 by default) minus sessions for transfers and
# plain commands.
MAX_AGENTS = 8
_CANNOT_RUN = 126  # what the agent answers for a command it cannot start (a missing cwd)


@dataclass
class _Agent:
    client: AgentClient
    connection: SshConnection  # the connection its channel is on
    busy: int = 0  # calls using it now (an agent in use is never closed to make room)
    used: float = field(default_factory=time.monotonic)


class SshAgentLink:
    """The agents of one host's sandboxes: one live client per sandbox in this process.

    `connect` returns the host's live connection (the backend passes
    `lambda: pool.get(target)`); it is asked on every start, so a reconnect is picked up.
    Each agent holds a session of that connection, and sshd allows only so many at once
    (MaxSessions, 10 by default): past `max_agents` live agents, starting one closes the
    least recently used idle one (it starts again when its sandbox is next used; background
    jobs do not mind), leaving sessions for transfers and plain commands.
    """

    def __init__(
        self,
        connect: Callable[[], SshConnection],
        *,
        python: str = "python3",
        start_timeout: float | None = None,
        max_agents: int = MAX_AGENTS,
    ) -> None:
        self.connect = connect
        self.python = python
        self.start_timeout = start_timeout
        self.max_agents = max_agents
        self._lock = threading.Lock()
        self._agents: dict[str, _Agent] = {}
        self._starting: dict[str, threading.Lock] = {}
        self._unavailable: dict[str, tuple[float, str]] = {}

    # --- clients -------------------------------------------------------------------------------
    def running(self, state: dict[str, Any]) -> bool:
        """Whether the sandbox has a live agent in this process already."""
        with self._lock:
            agent = self._agents.get(_key(state))
            return agent is not None and agent.client.alive

    def client(self, state: dict[str, Any]) -> AgentClient:
        """The sandbox's live agent, started if there is none. AgentUnavailable: the host has
        no usable python3; SandboxGone: the sandbox's directory is gone; SshError: the host."""
        with self._use(state) as agent:
            return agent.client

    @contextlib.contextmanager
    def _use(self, state: dict[str, Any]) -> Iterator[_Agent]:
        """The sandbox's live agent, marked in use while the block runs."""
        agent = self._agent(state)
        try:
            yield agent
        finally:
            with self._lock:
                agent.busy -= 1
                agent.used = time.monotonic()

    def _agent(self, state: dict[str, Any]) -> _Agent:
        """The sandbox's live agent (started if need be), its busy count raised by one."""
        key = _key(state)
        with self._lock:
            agent = self._taken(key)
            if agent is not None:
                return agent
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:  # one start per sandbox at a time; the others take its agent
            with self._lock:
                agent = self._taken(key)
                if agent is not None:
                    return agent
                old = self._agents.get(key)
                refused = self._unavailable.get(key)
            if refused is not None and time.monotonic() - refused[0] < UNAVAILABLE_FOR:
                raise AgentUnavailable(refused[1])
            self._make_room()
            agent = self._start(state)
            with self._lock:
                self._agents[key] = agent
                self._unavailable.pop(key, None)
        if old is not None and old.client.abandoned and old.client.pid:
            # It stopped answering (a command stopped it, say): an agent that does not read
            # never sees its channel close, so it would stay for good.
            with contextlib.suppress(BackendError):
                agent.client.kill_agent(old.client.pid, timeout=10)
        return agent

    def _taken(self, key: str) -> _Agent | None:
        """The live agent under `key`, its busy count raised (the caller holds the lock)."""
        agent = self._agents.get(key)
        if agent is None or not agent.client.alive:
            return None
        agent.busy += 1
        return agent

    def _make_room(self) -> None:
        """Close the least recently used idle agent if max_agents are live. An agent with a
        call in flight (an open port stream: a preview being served) is not idle."""
        with self._lock:
            live = {key: a for key, a in self._agents.items() if a.client.alive}
            idle = [
                (a.used, key) for key, a in live.items() if not a.busy and not a.client.inflight
            ]
            if len(live) < self.max_agents or not idle:
                return
            victim = self._agents.pop(min(idle)[1])
        victim.client.close()

    def _start(self, state: dict[str, Any]) -> _Agent:
        connection = self.connect()
        try:
            client = start_agent(
                connection, state, python=self.python, start_timeout=self.start_timeout
            )
        except StartFailed as failed:
            if (error := lost(connection, "starting the sandbox agent")) is not None:
                raise error from failed
            self.check_gone(state, connection)
            explained = failed.explain()
            if isinstance(explained, AgentUnavailable):
                with self._lock:
                    self._unavailable[_key(state)] = (time.monotonic(), str(explained))
            raise explained from failed
        return _Agent(client, connection, busy=1)

    def forget(self, state: dict[str, Any]) -> None:
        """Drop the sandbox's agent (it is being destroyed, or was replaced)."""
        key = _key(state)
        with self._lock:
            agent = self._agents.pop(key, None)
            self._unavailable.pop(key, None)
            self._starting.pop(key, None)
        if agent is not None:
            agent.client.close()

    def close(self) -> None:
        """Close every agent's channel (their agents stop their commands and exit)."""
        with self._lock:
            agents = list(self._agents.values())
            self._agents.clear()
        for agent in agents:
            agent.client.close()

    # --- failures ------------------------------------------------------------------------------
    def check_gone(self, state: dict[str, Any], connection: SshConnection | None = None) -> None:
        """SandboxGone if the sandbox's workspace no longer exists on the host: one round trip
        (on `connection`, default the host's current one). SshConnectionLost if that
        connection is lost; other SSH errors raise nothing (the caller's error stands)."""
        workspace = str(state["workspace"])
        try:
            result = (connection or self.connect()).run(
                f"test -d {shlex.quote(workspace)}", timeout=GONE_CHECK_TIMEOUT
            )
        except SshConnectionLost:
            raise
        except SshError:
            return
        if result.exit_code == 1:
            raise SandboxGone(
                f"the directory of sandbox {state['sandbox_id']} ({workspace}) no longer "
                "exists on its host"
            )

    def _raise_broken(self, state: dict[str, Any], agent: _Agent, exc: AgentBroken) -> None:
        """A call's agent channel broke: SshConnectionLost if the connection went with it,
        SandboxGone if the sandbox's directory did; else the caller raises `exc` itself."""
        doing = "a call to the sandbox agent was in flight"
        try:
            if (error := lost(agent.connection, doing)) is None:
                self.check_gone(state, agent.connection)
        except SshConnectionLost as failed:
            error = failed
        # Looked at again after the round trip: paramiko closes a dying connection's channels
        # a moment before it marks the connection itself inactive.
        error = error or lost(agent.connection, doing)
        if error is not None:
            raise error from exc

    # --- operations ----------------------------------------------------------------------------
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
        live_limit: int | None = None,
        grace: float | None = None,
    ) -> ExecResult:
        """SandboxBackend.exec through the agent (never retried: the command may have run).

        Two layers of timeout: the agent kills the command's session and sweeps /proc for its
        marker at `timeout`; the caller's own deadline (timeout + kill_after + grace) ends
        the wait if the agent cannot answer. live_limit, grace: as AgentClient.start_exec.
        """
        with self._use(state) as agent:
            call: ExecCall | None = None
            try:
                call = agent.client.start_exec(
                    argv,
                    cwd=layout.host_path(state, cwd),
                    env=_environment(state, env),
                    timeout=timeout,
                    output_cap=output_cap,
                    on_output=on_output,
                    stdin=stdin,
                    live_limit=live_limit,
                    grace=grace,
                )
                result = call.wait()
            except AgentBroken as exc:
                self._raise_broken(state, agent, exc)
                if call is not None and not agent.client.closed:
                    self._kill_orphan(state, call.marker)
                raise
            if not agent.client.alive and call is not None:  # cut by the deadline, dropped
                self._kill_orphan(state, call.marker)
        if result.exit_code == _CANNOT_RUN:  # no cwd, say: is the whole sandbox gone?
            self.check_gone(state)
        return result

    def _kill_orphan(self, state: dict[str, Any], marker: str) -> None:
        """The command's agent died under it: a new agent kills what carries its marker
        (nothing else would enforce its timeout now). Best effort."""
        try:
            self.client(state).kill_marked(marker, timeout=30)
        except SandboxGone:
            raise
        except Exception:
            logger.warning("could not kill the processes of command %s", marker, exc_info=True)

    def run_script(
        self,
        state: dict[str, Any],
        script: str,
        *args: str,
        output_cap: int = 64 * 1024,
        timeout: float = INTERNAL_TIMEOUT,
    ) -> ExecResult:
        """`sh -c script sandhub args...` as the sandbox, from its workspace (the platform's
        own helpers: job polls, upload checks)."""
        return self.exec(
            state,
            ["sh", "-c", script, "sandhub", *args],
            cwd=layout.WORKSPACE,
            env={},
            timeout=timeout,
            output_cap=output_cap,
        )

    def read_file(
        self, state: dict[str, Any], path: str, *, offset: int = 0, length: int
    ) -> tuple[int, bytes]:
        """(size of the file, up to `length` bytes from `offset`), read as the sandbox user."""
        host = layout.host_path(state, path)
        return self.idempotent(state, lambda c: c.read_file(host, offset=offset, length=length))

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        """Entries of a directory (or the one entry of a file), paths in the sandbox's terms."""
        entries = self.idempotent(state, lambda c: c.list_dir(layout.host_path(state, path)))
        return [replace(e, path=layout.sandbox_path(state, e.path)) for e in entries]

    def write_file(
        self, state: dict[str, Any], path: str, content: bytes | IO[bytes], *, mode: int = 0o644
    ) -> int:
        """Write a file under /workspace atomically, as the sandbox user; its size."""
        host, root = layout.host_path(state, path), str(state["workspace"])
        return self.call(state, lambda c: c.write_file(host, content, mode=mode, root=root))

    def open_port(self, state: dict[str, Any], port: int, timeout: float) -> PortStream:
        """A stream to the sandbox's own listener on 127.0.0.1:port on the host, through its
        agent, which runs as the sandbox's user and refuses a listener of another user
        (PortClosed); opening is tried again on a new agent if the channel broke."""
        return self.idempotent(state, lambda client: client.open_port(port, timeout))

    def call(self, state: dict[str, Any], operation: Callable[[AgentClient], T]) -> T:
        """operation(the sandbox's agent), once: for what must not run twice (a write, a job
        start). A broken channel raises AgentBroken, SandboxGone or SshConnectionLost."""
        try:
            with self._use(state) as agent:
                try:
                    return operation(agent.client)
                except AgentBroken as exc:
                    self._raise_broken(state, agent, exc)
                    raise
        except FileNotFoundError:  # the path, or the whole sandbox?
            self.check_gone(state)
            raise

    def idempotent(self, state: dict[str, Any], operation: Callable[[AgentClient], T]) -> T:
        """operation(the sandbox's agent), tried again once on a new agent if the channel
        broke: for reads, listings, kills."""
        try:
            with self._use(state) as agent:
                try:
                    return operation(agent.client)
                except AgentBroken as exc:
                    self._raise_broken(state, agent, exc)
            with self._use(state) as agent:
                return operation(agent.client)
        except FileNotFoundError:  # the path, or the whole sandbox?
            self.check_gone(state)
            raise


def _key(state: dict[str, Any]) -> str:
    return str(state["dir"])


def _environment(state: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The call's whole environment (the agent's own is the sandbox's, from its start)."""
    try:
        return layout.sandbox_env(state, env)
    except layout.LayoutError as exc:
        raise BackendError(str(exc)) from exc
