"""Closing a channel while its output streams in keeps the connection (hosts/backends/ssh/
ordering.py, its second race), on a real sshd."""

from __future__ import annotations

import os
import time

import pytest

from hosts.backends.ssh.connection import SshConnection
from tests.ssh.sshd import Sshd


def test_closing_a_streaming_channel_keeps_the_connection(
    sshd: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Channels closed while their output streams in (an attached terminal's agent channel)
    must not end the connection (ordering.py, second race). os.close is slowed down so the
    gap between paramiko's closing the fileno() pipe and marking it closed is wide: without
    the fix the transport thread's next feed wrote to the closed pipe (EBADF) and the whole
    connection died within the first few channels."""
    real_close = os.close

    def slow_close(fd: int) -> None:
        real_close(fd)
        time.sleep(0.005)

    with SshConnection(sshd.target()) as conn:
        for _ in range(20):
            channel = conn.open_channel()
            channel.fileno()  # the pipe our readers poll
            channel.exec_command("yes streaming")
            assert channel.recv(4096)  # it streams
            while channel.recv_ready():  # drained, as a reader keeps it: the next feed sets
                channel.recv(1 << 16)  # the pipe again
            monkeypatch.setattr(os, "close", slow_close)
            channel.close()
            monkeypatch.setattr(os, "close", real_close)
        assert conn.is_alive()
        assert conn.run("echo still-here", timeout=30).stdout == b"still-here\n"
