"""A paramiko session channel as the sandbox agent's transport (agent.client.Transport).

The agent runs as the one exec of its own channel on the host's pooled connection: the
channel's stdin carries the platform's frames to it, its stdout the agent's frames back, and
its stderr the agent's diagnostics (a traceback, "python3: not found", what sudo says).

Both of the channel's inbound streams share one SSH window: stderr that nobody reads would
stall stdout once it fills the window. So recv() waits on the channel's poll descriptor,
which paramiko makes readable while either stream holds data, takes whatever stderr holds
(keeping only its last bytes) and returns stdout's next bytes.
"""

from __future__ import annotations

import contextlib
import select
import time

import paramiko

from hosts.backends.agent.calls import NothingSent

__all__ = ["ChannelTransport", "exit_status", "read_ready"]

READ_SIZE = 64 * 1024
STDERR_KEEP = 8192


class ChannelTransport:
    """The agent's end of one exec channel: recv/sendall/close/said, as AgentClient wants."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel
        self.channel.settimeout(None)  # an idle agent is fine: the client's calls keep deadlines
        self._poller = select.poll()  # poll, not select: select fails on fds above 1024
        self._poller.register(channel.fileno(), select.POLLIN)
        self._stderr = bytearray()
        self._closed = False

    def recv(self) -> bytes:
        """The agent's next stdout bytes; b"" once the channel is at its end or closed."""
        channel = self.channel
        while True:
            # Looked at before draining: paramiko queues data before it marks the end, so
            # once the end is seen everything the agent wrote is already buffered.
            finished = channel.eof_received or channel.closed
            self._drain_stderr()
            if channel.recv_ready():
                return _recv(channel)
            if finished:
                return b""
            self._poller.poll()

    def _drain_stderr(self) -> None:
        while self.channel.recv_stderr_ready():
            self._stderr += self.channel.recv_stderr(READ_SIZE)
            del self._stderr[:-STDERR_KEEP]

    def sendall(self, data: bytes) -> None:
        """Send all of data; NothingSent if the channel failed before its first byte went (a
        channel already closed: the agent never saw any of it), else OSError."""
        if self._closed:
            raise NothingSent("the agent's channel is closed")
        sent = 0
        try:
            while sent < len(data):
                sent += self.channel.send(data[sent:] if sent else data)
        except (EOFError, OSError, paramiko.SSHException) as exc:  # the client expects OSError
            failure = NothingSent if sent == 0 else OSError
            raise failure(f"the agent's channel broke: {exc or 'closed'}") from exc

    def close(self) -> None:
        """Close the channel: sshd closes the agent's stdin (it stops its commands and exits)
        and the reader's poll wakes up (paramiko marks a closed channel readable for good)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.channel.close()

    def said(self) -> str:
        with contextlib.suppress(Exception):
            self._drain_stderr()
        return self._stderr.decode("utf-8", "replace").strip()

    def exit_status(self, wait: float = 0.0) -> int | None:
        return exit_status(self.channel, wait)


def _recv(channel: paramiko.Channel) -> bytes:
    try:
        return channel.recv(READ_SIZE)
    except (OSError, EOFError, paramiko.SSHException):
        return b""


def read_ready(channel: paramiko.Channel, poller: select.poll, timeout: float | None) -> bool:
    """Wait until the channel has data on either stream or is at its end; False on timeout."""
    if channel.recv_ready() or channel.recv_stderr_ready() or channel.eof_received:
        return True
    if channel.closed:
        return True
    return bool(poller.poll(None if timeout is None else max(int(timeout * 1000), 1)))


def exit_status(channel: paramiko.Channel, wait: float = 0.0) -> int | None:
    """The command's exit status, waiting up to `wait` s for sshd to report it (it comes
    around the end of the output); None if none came (a lost link, a closed channel, a
    command killed by a signal)."""
    give_up = time.monotonic() + wait
    while not channel.exit_status_ready():
        if channel.closed or time.monotonic() >= give_up:
            return None
        time.sleep(0.005)
    status = channel.recv_exit_status()
    return None if status < 0 else status
