"""The sandbox agents of one host, for every kind of host: one live AgentClient per sandbox.

A kind supplies an AgentPlace (docker/agent.py, ssh/agent.py): how an agent's stream is
opened for a sandbox (an engine exec, an SSH channel), what a failure means there (is the
sandbox gone? the connection?), and how the sandbox's paths and environment look from the
agent. Everything else is here, once:

- one live client per sandbox in this process, one start per sandbox at a time, a new one
  when the last one's stream broke (its calls in flight fail with AgentBroken);
- a sandbox found unable to run the agent (no python3: AgentUnavailable) is not asked again
  for UNAVAILABLE_FOR seconds, so it does not pay a failed start on every call;
- an agent that stopped answering is killed by its successor (it would never see its end of
  input, as it does not read);
- at most `max_agents` live agents (a kind whose connection limits sessions, as sshd's
  MaxSessions does): past it the least recently used idle one is closed;
- commands are never retried (they may have run); a command whose agent died under it is
  killed by its marker from the next agent; reads, listings and port opens are tried again
  once on a new agent; writes and job starts never;
- but any request that never left this process (AgentUnreached: the agent's stream was
  found broken before the request's first byte went, as when a connection was cut a moment
  before) is tried once on a new agent, whatever it asks: the agent never saw it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import IO, Any, Protocol, TypeVar

from typing_extensions import Unpack

from hosts.backends.agent.client import (
    AgentBroken,
    AgentClient,
    AgentUnavailable,
    AgentUnreached,
    ExecCall,
)
from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    PortStream,
    SandboxGone,
)
from hosts.backends.options import CommandOptions
from hosts.backends.place import SandboxPlace
from hosts.backends.stdin import StdinPipe

__all__ = ["AgentLink", "AgentPlace", "AgentUnavailable", "Started"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

UNAVAILABLE_FOR = 300.0  # seconds a sandbox found without python3 is not asked again
INTERNAL_TIMEOUT = 60.0  # the platform's own scripts through the agent (job polls, checks)
_CANNOT_RUN = 126  # what the agent answers for a command it cannot start (a missing cwd)


@dataclass
class Started:
    """A running agent and what its kind needs to explain a failure later (the connection
    its channel is on, say)."""

    client: AgentClient
    context: Any = None


class AgentPlace(SandboxPlace, Protocol):
    """What a kind of host supplies for its sandboxes' agents: the place (place.py), how an
    agent starts there and what a broken stream means there."""

    def start(self, state: dict[str, Any]) -> Started:
        """A running agent for the sandbox. AgentUnavailable: it cannot run there (the link
        remembers that); SandboxGone: the sandbox is gone; BackendError: anything else."""
        ...

    def after_broken(self, state: dict[str, Any], context: Any) -> None:
        """An agent's stream broke under a call: raise what that means (SandboxGone, a lost
        connection), or return to let the call's own AgentBroken stand."""
        ...


@dataclass
class _Agent:
    started: Started
    busy: int = 0  # calls using it now (an agent in use is never closed to make room)
    used: float = field(default_factory=time.monotonic)

    @property
    def client(self) -> AgentClient:
        return self.started.client


class AgentLink:
    """The agents of one host's sandboxes in this process."""

    def __init__(self, place: AgentPlace, *, max_agents: int | None = None) -> None:
        self.place = place
        self.max_agents = max_agents
        self._lock = threading.Lock()
        self._agents: dict[str, _Agent] = {}
        self._starting: dict[str, threading.Lock] = {}
        self._unavailable: dict[str, tuple[float, str]] = {}

    # --- clients -------------------------------------------------------------------------------
    def running(self, state: dict[str, Any]) -> bool:
        """Whether the sandbox has a live agent in this process already."""
        with self._lock:
            agent = self._agents.get(self._key(state))
            return agent is not None and agent.client.alive

    def client(self, state: dict[str, Any]) -> AgentClient:
        """The sandbox's live agent, started if there is none."""
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
        key = self._key(state)
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
            self._forget_dead()
            self._make_room()
            try:
                agent = _Agent(self.place.start(state), busy=1)
            except AgentUnavailable as exc:
                with self._lock:
                    self._unavailable[key] = (time.monotonic(), str(exc))
                raise
            with self._lock:
                self._agents[key] = agent
                self._unavailable.pop(key, None)
        if old is not None and old.client.abandoned and old.client.pid:
            # It stopped answering (a command stopped it, say): an agent that does not read
            # never sees its stream close, so it would stay for good.
            with contextlib.suppress(BackendError):
                agent.client.kill_agent(old.client.pid, timeout=10)
        return agent

    def _key(self, state: dict[str, Any]) -> str:
        key = self.place.key(state)
        if key is None:
            raise BackendError("the sandbox has nothing that runs an agent")
        return key

    def _taken(self, key: str) -> _Agent | None:
        """The live agent under `key`, its busy count raised (the caller holds the lock)."""
        agent = self._agents.get(key)
        if agent is None or not agent.client.alive:
            return None
        agent.busy += 1
        return agent

    def _forget_dead(self) -> None:
        """Drop the entries of agents whose stream ended (their sandbox deleted through another
        process, say), so a long-lived process keeps nothing of every sandbox it ever served.
        One dropped for not answering stays: its successor must kill it."""
        with self._lock:
            for key, agent in list(self._agents.items()):
                if not agent.client.alive and not agent.client.abandoned:
                    del self._agents[key]

    def _make_room(self) -> None:
        """Close the least recently used idle agent if max_agents are live. An agent with a
        call in flight (an open port stream: a preview being served) is not idle."""
        if self.max_agents is None:
            return
        with self._lock:
            live = {key: a for key, a in self._agents.items() if a.client.alive}
            idle = [
                (a.used, key) for key, a in live.items() if not a.busy and not a.client.inflight
            ]
            if len(live) < self.max_agents or not idle:
                return
            victim = self._agents.pop(min(idle)[1])
        victim.client.close()

    def forget(self, state: dict[str, Any]) -> None:
        """Drop the sandbox's agent (it is being destroyed, or was replaced)."""
        key = self.place.key(state)
        if key is None:
            return
        with self._lock:
            agent = self._agents.pop(key, None)
            self._unavailable.pop(key, None)
            self._starting.pop(key, None)
        if agent is not None:
            agent.client.close()

    def close(self) -> None:
        """Close every agent's stream (their agents stop their commands and exit)."""
        with self._lock:
            agents = list(self._agents.values())
            self._agents.clear()
        for agent in agents:
            agent.client.close()

    def check_gone(self, state: dict[str, Any]) -> None:
        """SandboxGone if the sandbox no longer exists (the kind's own cheap look)."""
        self.place.after_missing(state)

    # --- operations ----------------------------------------------------------------------------
    def exec(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        live_limit: int | None = None,
        grace: float | None = None,
        **options: Unpack[CommandOptions],
    ) -> ExecResult:
        """SandboxBackend.exec through the agent (never retried: the command may have run).

        Two layers of timeout: the agent kills the command's session and sweeps /proc for its
        marker at `timeout`; the caller's own deadline (timeout + kill_after + grace) ends
        the wait if the agent cannot answer. live_limit, grace: as AgentClient.start_exec.
        """

        def start(client: AgentClient) -> ExecCall:
            return client.start_exec(
                argv,
                cwd=self.place.host_path(state, options["cwd"]),
                env=self.place.environment(state, options["env"]),
                timeout=options["timeout"],
                output_cap=options["output_cap"],
                on_output=options.get("on_output"),
                stdin=options.get("stdin"),
                live_limit=live_limit,
                grace=grace,
                marker=options.get("marker"),
            )

        try:
            result = self._reaching(lambda: self._exec_once(state, start))
        finally:
            stdin = options.get("stdin")
            if isinstance(stdin, StdinPipe):
                stdin.close()  # the command ended: its pump stops, later writes are refused
        if result.exit_code == _CANNOT_RUN:  # no cwd, say: is the whole sandbox gone?
            self.place.after_missing(state)
        return result

    def _exec_once(
        self, state: dict[str, Any], start: Callable[[AgentClient], ExecCall]
    ) -> ExecResult:
        with self._use(state) as agent:
            call: ExecCall | None = None
            try:
                call = start(agent.client)
                result = call.wait()
            except AgentUnreached:
                if call is None:  # the request never left: _reaching tries a new agent
                    raise
                self.place.after_broken(state, agent.started.context)
                raise
            except AgentBroken:
                self.place.after_broken(state, agent.started.context)
                if call is not None and not agent.client.closed:
                    self._kill_orphan(state, call.marker)
                raise
            if not agent.client.alive and call is not None:  # cut by the deadline, dropped
                self._kill_orphan(state, call.marker)
        return result

    @staticmethod
    def _reaching(attempt: Callable[[], T]) -> T:
        """attempt(), once more if its request never reached the agent (AgentUnreached): the
        second time on a new agent, as the dead one is no longer taken."""
        try:
            return attempt()
        except AgentUnreached:
            logger.info("a request found its sandbox agent gone before it left; tried again")
            return attempt()

    def kill_command(self, state: dict[str, Any], marker: str) -> bool:
        """SIGKILL what carries the exec marker (a running command of this or another
        process); whether the sweep ran to its end."""
        return self.idempotent(state, lambda client: client.kill_marked(marker, timeout=30))

    def _kill_orphan(self, state: dict[str, Any], marker: str) -> None:
        """The command's agent died under it: a new agent kills what carries its marker
        (nothing else would enforce its timeout now). Best effort."""
        try:
            self.client(state).kill_marked(marker, timeout=30)
        except SandboxGone:
            raise
        except Exception:
            self.place.after_broken(state, None)  # no new agent: is the sandbox going?
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
            cwd="/workspace",
            env={},
            timeout=timeout,
            output_cap=output_cap,
        )

    def read_file(
        self, state: dict[str, Any], path: str, *, offset: int = 0, length: int
    ) -> tuple[int, bytes]:
        """(size of the file, up to `length` bytes from `offset`), read as the sandbox user."""
        host = self.place.host_path(state, path)
        return self.idempotent(state, lambda c: c.read_file(host, offset=offset, length=length))

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        """Entries of a directory (or the one entry of a file), paths in the sandbox's terms."""
        host = self.place.host_path(state, path)
        entries = self.idempotent(state, lambda c: c.list_dir(host))
        return [replace(e, path=self.place.sandbox_path(state, e.path)) for e in entries]

    def write_file(
        self, state: dict[str, Any], path: str, content: bytes | IO[bytes], *, mode: int = 0o644
    ) -> int:
        """Write a file atomically, as the sandbox user; its size."""
        host, root = self.place.host_path(state, path), self.place.write_root(state)
        return self.call(state, lambda c: c.write_file(host, content, mode=mode, root=root))

    def open_port(self, state: dict[str, Any], port: int, timeout: float) -> PortStream:
        """A stream to the sandbox's own listener on 127.0.0.1:port through its agent (so a
        sandbox without network serves it too; the agent refuses another user's listener:
        PortClosed); opening is tried again on a new agent if the stream broke."""
        return self.idempotent(state, lambda client: client.open_port(port, timeout))

    def call(self, state: dict[str, Any], operation: Callable[[AgentClient], T]) -> T:
        """operation(the sandbox's agent), once: for what must not run twice (a write, a job
        start). A broken stream raises AgentBroken, or what the kind finds it means."""
        try:
            return self._reaching(lambda: self._call_once(state, operation))
        except FileNotFoundError:  # the path, or the whole sandbox?
            self.place.after_missing(state)
            raise

    def _call_once(self, state: dict[str, Any], operation: Callable[[AgentClient], T]) -> T:
        with self._use(state) as agent:
            try:
                return operation(agent.client)
            except AgentUnreached:
                raise  # never reached it: _reaching tries a new agent
            except AgentBroken:
                self.place.after_broken(state, agent.started.context)
                raise

    def idempotent(self, state: dict[str, Any], operation: Callable[[AgentClient], T]) -> T:
        """operation(the sandbox's agent), tried again once on a new agent if the stream
        broke: for reads, listings, kills."""
        try:
            with self._use(state) as agent:
                try:
                    return operation(agent.client)
                except AgentUnreached:
                    pass  # never reached it: the same as below, without asking the place
                except AgentBroken:
                    self.place.after_broken(state, agent.started.context)
            return self._reaching(lambda: self._call_once(state, operation))
        except FileNotFoundError:  # the path, or the whole sandbox?
            self.place.after_missing(state)
            raise
