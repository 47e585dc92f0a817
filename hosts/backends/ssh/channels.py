"""A command started on its own channel of a host's live connection, tried once more on a
new connection when the first one turns out to have died under the start.

The callers are the starts that may safely happen twice: a sandbox agent (one whose
channel died exits when its input ends) and a tar transfer (it is re-sent whole: nothing of
its data has gone yet). After a cut (sshd killed, the host's network dropped for a moment)
the pooled connection looks alive until paramiko's thread reads its end: a start in that
moment would fail although a new connection works at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import paramiko

from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.errors import SshConnectionLost, SshError

__all__ = ["start_on_live_connection"]


def start_on_live_connection(
    connect: Callable[[], SshConnection], command: str, doing: str
) -> tuple[SshConnection, paramiko.Channel]:
    """(connection, channel running `command`), from `connect()` (the pool's live
    connection, remade when broken); once more on a new one if the first died meanwhile.
    SshConnectionLost if the second does too, SshError for any other failure."""
    try:
        return _start(connect(), command, doing)
    except SshConnectionLost:
        return _start(connect(), command, doing)


def _start(
    connection: SshConnection, command: str, doing: str
) -> tuple[SshConnection, paramiko.Channel]:
    channel = connection.open_channel()  # SshConnectionLost if the connection is gone
    try:
        channel.exec_command(command)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        with contextlib.suppress(Exception):  # a dead connection's channel may not close cleanly
            channel.close()
        if isinstance(exc, EOFError) or not connection.is_alive():
            connection.mark_broken()
            raise SshConnectionLost(
                f"the connection to {connection.target.where} was lost while {doing}"
            ) from exc
        raise SshError(f"{doing} on {connection.target.where} failed: {exc}") from exc
    return connection, channel
