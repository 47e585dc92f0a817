"""Starting the sandbox agent on an SSH host, and what a failed start means.

`python3 -I -u -c BOOTSTRAP` runs as the sandbox (layout.as_sandbox: its user through
`sudo -n -u`, its limits, a clean environment) as the one exec of a new session channel; the
agent's source follows on the channel's stdin (AgentClient sends it) and the agent answers
HELLO. A start that fails is explained from what came back on the channel: sudo refused, no
python3 on the host (AgentUnavailable: the backend may run commands another way), or
whatever the agent or the shell said.
"""

from __future__ import annotations

from typing import Any

import paramiko

from hosts.backends.agent.client import AgentClient, AgentStartFailed, AgentUnavailable
from hosts.backends.agent.protocol import BOOTSTRAP
from hosts.backends.base import BackendError
from hosts.backends.ssh import layout
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.errors import SshConnectionLost, SshError
from hosts.backends.ssh.transport import ChannelTransport

__all__ = ["StartFailed", "lost", "start_agent"]

_NOT_FOUND_EXIT = 127  # what the shell (or env) exits with for a missing program


class StartFailed(Exception):
    """The agent did not come up; explain() says why, as the error to raise."""

    def __init__(
        self,
        failure: AgentStartFailed,
        transport: ChannelTransport,
        connection: SshConnection,
        state: dict[str, Any],
        python: str,
    ) -> None:
        super().__init__(str(failure))
        self.failure, self.transport, self.connection = failure, transport, connection
        self.state, self.python = state, python

    def explain(self) -> BackendError:
        failure, where = self.failure, self.connection.target.where
        said = f"{failure.early.decode('utf-8', 'replace')} {failure.said}".strip()
        status = self.transport.exit_status(wait=2.0)
        if "sudo" in said and ("password" in said or "not allowed" in said):
            return BackendError(
                f"the login user on {where} may not run commands as the sandbox's user "
                f"{self.state['user']} (sudo -n refused: {said[-300:]})"
            )
        missing = f"'{self.python}'" in said and "No such file" in said  # as env says it
        if status == _NOT_FOUND_EXIT or missing or "SyntaxError" in said:
            return AgentUnavailable(
                f"the sandbox agent cannot run on {where}: no usable {self.python} "
                f"({said[-300:] or f'exit status {status}'})"
            )
        detail = said[-600:] or f"exit status {status}"
        return BackendError(f"the sandbox agent did not start on {where}: {detail}")


def start_agent(
    connection: SshConnection,
    state: dict[str, Any],
    *,
    python: str = "python3",
    start_timeout: float | None = None,
) -> AgentClient:
    """A running agent for the sandbox on a channel of `connection`. StartFailed: it did not
    come up; SshError: the channel could not be opened or its exec was refused."""
    try:
        # No cwd: the agent never needs one (every command names its own), and a `cd` first
        # would cost a shell.
        command = layout.as_sandbox(state, [python, "-I", "-u", "-c", BOOTSTRAP])
    except layout.LayoutError as exc:
        raise BackendError(f"cannot start the sandbox agent: {exc}") from exc
    channel = connection.open_channel()
    try:
        channel.exec_command(command)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        channel.close()
        raise lost(connection, "starting the sandbox agent") or SshError(
            f"starting the sandbox agent on {connection.target.where} failed: {exc}"
        ) from exc
    transport = ChannelTransport(channel)
    options = {} if start_timeout is None else {"start_timeout": start_timeout}
    try:
        return AgentClient(transport, label=str(state["sandbox_id"]), **options)
    except AgentStartFailed as exc:
        raise StartFailed(exc, transport, connection, state, python) from exc


def lost(connection: SshConnection, doing: str) -> SshConnectionLost | None:
    """SshConnectionLost (to raise) if `connection` is no longer alive, else None."""
    if connection.is_alive():
        return None
    return SshConnectionLost(f"the connection to {connection.target.where} was lost while {doing}")
