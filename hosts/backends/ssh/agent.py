"""The sandbox agent on SSH hosts: its transport (one channel each) and what failures mean.

`python3 -I -u -c BOOTSTRAP` runs as the sandbox (layout.as_sandbox: its user through
`sudo -n -u`, its limits, a clean environment) as the one exec of a session channel of its
own on the host's pooled connection; the agent's source follows on the channel's stdin and
the agent answers HELLO. Nothing is copied onto the host and nothing listens on a port.

The link itself (one client per sandbox, restarts, retries) is agent/link.py's, shared by
every kind; SshAgentPlace supplies the start and the checks. A start that fails is explained
from what came back on the channel: sudo refused, no python3 on the host (AgentUnavailable:
the backend runs commands another way), or whatever the agent or the shell said. After a
failure one cheap look (`test -d` on the connection) tells whether the sandbox's directory
is gone (SandboxGone); a connection that died under the agent is SshConnectionLost.

Paths: callers speak of /workspace; layout.host_path maps it to the sandbox's directory on
the host, layout.sandbox_path maps listings back. Every call's environment is
layout.sandbox_env (the sandbox's variables, the call's, and the fixed ones).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hosts.backends.agent.client import AgentClient, AgentStartFailed, AgentUnavailable
from hosts.backends.agent.link import AgentLink, Started
from hosts.backends.agent.protocol import BOOTSTRAP
from hosts.backends.base import BackendError, SandboxGone
from hosts.backends.ssh import layout, provision
from hosts.backends.ssh.channels import start_on_live_connection
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.errors import SshConnectionLost, SshError
from hosts.backends.ssh.transport import ChannelTransport

__all__ = ["SshAgentPlace", "agent_link", "lost"]

GONE_CHECK_TIMEOUT = 10.0
# Live agents per link (per host, per process) before the least recently used idle one is
# closed to make room: sshd's MaxSessions (10 by default) minus sessions for transfers and
# plain commands.
MAX_AGENTS = 8
_NOT_FOUND_EXIT = 127  # what the shell (or env) exits with for a missing program


class SshAgentPlace:
    """How agents start on one host's sandboxes, and what their failures mean.

    `connect` returns the host's live connection (the backend passes `lambda:
    pool.get(target)`); it is asked on every start, so a reconnect is picked up.
    """

    def __init__(
        self,
        connect: Callable[[], SshConnection],
        *,
        python: str = "python3",
        start_timeout: float | None = None,
    ) -> None:
        self.connect = connect
        self.python = python
        self.start_timeout = start_timeout

    def key(self, state: dict[str, Any]) -> str | None:
        return str(state["dir"])

    def start(self, state: dict[str, Any]) -> Started:
        """A running agent; started once more, on a new connection, if the first start met a
        connection that had just died (a start may happen twice: see channels.py)."""
        try:
            return self._start_once(state)
        except SshConnectionLost:
            return self._start_once(state)

    def _start_once(self, state: dict[str, Any]) -> Started:
        try:
            # No cwd: the agent never needs one (every command names its own), and a `cd`
            # first would cost a shell.
            # The marker also on its command line: the agent is not dumpable, so destroy
            # cannot read its environment as the login user (provision._DESTROY).
            marker = f"{layout.MARKER_ENV}={layout.check_sandbox_id(state['sandbox_id'])}"
            argv = [self.python, "-I", "-u", "-c", BOOTSTRAP, marker]
            command = layout.as_sandbox(state, argv)
        except layout.LayoutError as exc:
            raise BackendError(f"cannot start the sandbox agent: {exc}") from exc
        connection, channel = start_on_live_connection(
            self.connect, command, "starting the sandbox agent"
        )
        transport = ChannelTransport(channel)
        options = {} if self.start_timeout is None else {"start_timeout": self.start_timeout}
        try:
            client = AgentClient(transport, label=str(state["sandbox_id"]), **options)
        except AgentStartFailed as failed:
            if (error := lost(connection, "starting the sandbox agent")) is not None:
                raise error from failed
            self.check_gone(state, connection)
            raise self._explain(failed, transport, connection, state) from failed
        return Started(client, connection)

    def _explain(
        self,
        failure: AgentStartFailed,
        transport: ChannelTransport,
        connection: SshConnection,
        state: dict[str, Any],
    ) -> BackendError:
        """Why the agent did not come up, as the error to raise."""
        where = connection.target.where
        said = f"{failure.early.decode('utf-8', 'replace')} {failure.said}".strip()
        status = transport.exit_status(wait=2.0)
        if "sudo" in said and ("password" in said or "not allowed" in said):
            return BackendError(
                f"the login user on {where} may not run commands as the sandbox's user "
                f"{state['user']} (sudo -n refused: {said[-300:]})"
            )
        missing = f"'{self.python}'" in said and "No such file" in said  # as env says it
        if status == _NOT_FOUND_EXIT or missing or "SyntaxError" in said:
            return AgentUnavailable(
                f"the sandbox agent cannot run on {where}: no usable {self.python} "
                f"({said[-300:] or f'exit status {status}'})"
            )
        detail = said[-600:] or f"exit status {status}"
        return BackendError(f"the sandbox agent did not start on {where}: {detail}")

    # --- failures ------------------------------------------------------------------------------
    def check_gone(self, state: dict[str, Any], connection: SshConnection | None = None) -> None:
        """SandboxGone if the sandbox is no longer on the host (provision.status: its
        directory, and an isolated one's namespaces): one round trip (on `connection`, default
        the host's current one). SshConnectionLost if that connection is lost; other errors
        raise nothing (the caller's error stands)."""
        try:
            missing = provision.status(connection or self.connect(), state) == "missing"
        except SshConnectionLost:
            raise
        except (SshError, BackendError):
            return
        if missing:
            raise SandboxGone(
                f"sandbox {state['sandbox_id']} is no longer on its host (its directory"
                f"{' or its namespaces' if state.get('isolated') else ''} gone)"
            )

    def after_broken(self, state: dict[str, Any], context: Any) -> None:
        """SshConnectionLost if the agent's connection went with its channel, SandboxGone if
        the sandbox's directory did."""
        connection = context if isinstance(context, SshConnection) else self.connect()
        doing = "a call to the sandbox agent was in flight"
        try:
            if (error := lost(connection, doing)) is None:
                self.check_gone(state, connection)
        except SshConnectionLost as failed:
            error = failed
        # Looked at again after the round trip: paramiko closes a dying connection's channels
        # a moment before it marks the connection itself inactive.
        error = error or lost(connection, doing)
        if error is not None:
            raise error

    def after_missing(self, state: dict[str, Any]) -> None:
        self.check_gone(state)

    # --- the sandbox as the agent sees it --------------------------------------------------
    def host_path(self, state: dict[str, Any], path: str) -> str:
        return layout.host_path(state, path)

    def sandbox_path(self, state: dict[str, Any], path: str) -> str:
        return layout.sandbox_path(state, path)

    def environment(self, state: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
        """The call's whole environment (the agent's own is the sandbox's, from its start)."""
        try:
            return layout.sandbox_env(state, env)
        except layout.LayoutError as exc:
            raise BackendError(str(exc)) from exc

    def write_root(self, state: dict[str, Any]) -> str:
        return str(state["workspace"])  # the login user's files are next door: stay inside

    def job_dir(self, state: dict[str, Any], job_id: str) -> str:
        return layout.job_dir(state, job_id)


def agent_link(
    connect: Callable[[], SshConnection],
    *,
    python: str = "python3",
    start_timeout: float | None = None,
    max_agents: int = MAX_AGENTS,
) -> AgentLink:
    """The agents of one host's sandboxes. Each holds a session of the host's connection, and
    sshd allows only so many at once (MaxSessions, 10 by default): past `max_agents` live
    agents, starting one closes the least recently used idle one (it starts again when its
    sandbox is next used; background jobs do not mind), leaving sessions for transfers and
    plain commands."""
    place = SshAgentPlace(connect, python=python, start_timeout=start_timeout)
    return AgentLink(place, max_agents=max_agents)


def lost(connection: SshConnection, doing: str) -> SshConnectionLost | None:
    """SshConnectionLost (to raise) if `connection` is no longer alive, else None."""
    if connection.is_alive():
        return None
    return SshConnectionLost(f"the connection to {connection.target.where} was lost while {doing}")
