"""An exec channel: the SSH kind's one primitive for the per-command path (fallback/), used on
a host whose login user has no usable python3 (the sandbox agent cannot run there).

Every call is one exec channel on the host's pooled connection, running argv as the sandbox
(layout.as_sandbox: its user, its limits, `env -i`). Output is read as it comes; stdin goes
over the channel itself (its end is the command's end of file), so unlike Docker's
environment variable it has no size limit.
"""

from __future__ import annotations

import contextlib
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import paramiko

from hosts.backends.base import BackendError
from hosts.backends.fallback.primitive import Deadline, Output
from hosts.backends.ssh import layout
from hosts.backends.ssh.agent import lost
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.errors import SshError

__all__ = ["SshPlainExec", "feed", "start_channel"]

_CHUNK = 64 * 1024


class SshPlainExec:
    """One exec channel per call on the host's connection (`connect` is asked each time, so a
    reconnect is picked up)."""

    max_stdin: int | None = None

    def __init__(self, connect: Callable[[], SshConnection]) -> None:
        self.connect = connect

    def run(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        env: dict[str, str],
        stdin: bytes | None,
        deadline: float,
        output: Output,
        cwd: str | None = None,
    ) -> int | None:
        try:
            line = layout.as_sandbox(state, argv, env=env, cwd=cwd, own_env=True)
        except layout.LayoutError as exc:
            raise BackendError(str(exc)) from exc
        connection = self.connect()
        channel = start_channel(connection, line)
        try:
            feed(channel, stdin or b"")
            if not _pump(channel, deadline, output):
                raise Deadline
            exit_code = _exit_status(channel, deadline)
        finally:
            _close(channel)
        if exit_code is None and (error := lost(connection, "a command ran")) is not None:
            raise error
        return exit_code


def start_channel(connection: SshConnection, line: str) -> paramiko.Channel:
    """A new session channel running `line`."""
    channel = connection.open_channel()
    try:
        channel.exec_command(line)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        _close(channel)
        raise lost(connection, "starting a command") or SshError(
            f"starting a command on {connection.target.where} failed: {exc}"
        ) from exc
    return channel


def feed(channel: paramiko.Channel, data: bytes) -> None:
    """stdin, then its end; from a thread when large, so a command that prints before it
    reads (and fills the window back to us) cannot deadlock against the send."""

    def send() -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            if data:
                channel.sendall(data)
            channel.shutdown_write()

    if len(data) <= _CHUNK:  # fits in the window: sent at once
        send()
        return
    threading.Thread(target=send, name="sandhub-ssh-plain-stdin", daemon=True).start()


def _pump(channel: paramiko.Channel, deadline: float, output: Output) -> bool:
    """Read stdout and stderr until the end (True) or the deadline (False)."""
    # channel.fileno() is readable while either stream has data, and for good once the
    # channel is closed. poll, not select: select fails on descriptors above 1024.
    poller = select.poll()
    poller.register(channel.fileno(), select.POLLIN)
    while True:
        # Checked before draining: data comes before EOF on the transport.
        finished = channel.eof_received or channel.closed
        while channel.recv_ready():
            if chunk := channel.recv(_CHUNK):
                output("stdout", chunk)
        while channel.recv_stderr_ready():
            if chunk := channel.recv_stderr(_CHUNK):
                output("stderr", chunk)
        if finished:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        poller.poll(max(int(remaining * 1000), 1))


def _exit_status(channel: paramiko.Channel, deadline: float) -> int | None:
    """The exit status sshd sends around the end of output; None if none came."""
    channel.status_event.wait(max(deadline - time.monotonic(), 1.0))
    if not channel.exit_status_ready():
        return None
    status = channel.exit_status
    return None if status < 0 else status


def _close(channel: paramiko.Channel) -> None:
    with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
        channel.close()
