"""Port streams on SSH hosts without the sandbox agent: a direct-tcpip channel (what `ssh -L`
uses) to 127.0.0.1:PORT on the host's persistent connection, as a PortStream.

Only for a host without per-sandbox users (one private to one team): sshd connects as the
login user, and nothing tells whose listener it reached. On a host with per-sandbox users
the backend goes through the agent, which checks the listener's owner, or refuses.

paramiko channels have their own windowing both ways: a write waits while the far side has
not taken what was sent, and paramiko holds at most its window of unread data.
"""

from __future__ import annotations

import contextlib
import select

import paramiko

from hosts.backends.base import BackendError, PortClosed, PortStream
from hosts.backends.ssh.agent import lost
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.errors import SshError
from hosts.backends.ssh.ordering import order_sends
from hosts.backends.ssh.transport import read_ready

__all__ = ["ChannelPortStream", "open_direct"]

_CONNECT_FAILED = 2  # SSH_OPEN_CONNECT_FAILED: sshd's connect to the port was refused
_PROHIBITED = 1  # SSH_OPEN_ADMINISTRATIVELY_PROHIBITED: forwarding is off in sshd_config
_CHANNEL_ERRORS = (paramiko.SSHException, EOFError, OSError)


def open_direct(connection: SshConnection, port: int, timeout: float = 5.0) -> PortStream:
    """A stream to 127.0.0.1:port (else [::1]:port) on the host. PortClosed when nothing
    listens there; BackendError when the host's sshd does not forward ports."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise BackendError(f"port must be a number from 1 to 65535, not {port!r}")
    where = connection.target.where
    for address in ("127.0.0.1", "::1"):
        try:
            channel = connection.transport.open_channel(
                "direct-tcpip",
                dest_addr=(address, port),
                src_addr=("127.0.0.1", 0),
                timeout=timeout,
            )
        except paramiko.ChannelException as exc:
            if exc.code == _CONNECT_FAILED:
                continue
            if exc.code == _PROHIBITED:
                raise BackendError(
                    f"the sshd of {where} does not forward ports (AllowTcpForwarding): "
                    "previews on it need python3 on the host for the sandbox agent"
                ) from exc
            raise BackendError(f"{where} refused a channel to port {port}: {exc.text}") from exc
        except _CHANNEL_ERRORS as exc:
            raise lost(connection, f"opening a channel to port {port}") or SshError(
                f"opening a channel to port {port} on {where} failed: {exc}"
            ) from exc
        return ChannelPortStream(channel, port)
    raise PortClosed(f"nothing listens on port {port} on {where}")


class ChannelPortStream(PortStream):
    """A direct-tcpip channel as a PortStream: one thread may read while another writes."""

    def __init__(self, channel: paramiko.Channel, port: int) -> None:
        # Never a send after the channel's CLOSE: OpenSSH would drop the whole connection.
        self.channel = order_sends(channel)
        self.channel.settimeout(None)  # reads wait on the poller, with their own timeout
        self.port = port
        self._poller = select.poll()  # poll, not select: select fails on fds above 1024
        self._poller.register(channel.fileno(), select.POLLIN)
        self._closed = False

    def read(self, max_bytes: int = 65536, timeout: float | None = None) -> bytes:
        if self._closed:
            return b""
        if not read_ready(self.channel, self._poller, timeout):
            raise TimeoutError(f"nothing came from port {self.port} in {timeout:g} s")
        try:
            return bytes(self.channel.recv(max(1, max_bytes)))
        except _CHANNEL_ERRORS as exc:
            if self._closed:
                return b""
            raise BackendError(f"reading from port {self.port} failed: {exc or 'closed'}") from exc

    def write(self, data: bytes) -> None:
        if self._closed:
            raise BackendError(f"the stream to port {self.port} is closed")
        try:
            self.channel.sendall(data)
        except _CHANNEL_ERRORS as exc:
            raise BackendError(f"writing to port {self.port} failed: {exc or 'closed'}") from exc

    def close_write(self) -> None:
        if self._closed:
            return
        try:
            self.channel.shutdown_write()
        except _CHANNEL_ERRORS as exc:
            raise BackendError(f"closing the stream to port {self.port} failed: {exc}") from exc

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.channel.close()

    def __repr__(self) -> str:
        return f"<ChannelPortStream port {self.port}>"
