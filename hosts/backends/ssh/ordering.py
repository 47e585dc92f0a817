"""Keep paramiko from sending on a channel after its CLOSE (paramiko issue #1115, open).

paramiko builds a channel message under the channel's lock but sends it after releasing it
(to avoid a deadlock during re-keying). When the server closes a session (its command
exited) while a user thread is sending stdin or EOF, paramiko's transport thread can answer
with CLOSE in that gap, and the user thread's message goes out after it. OpenSSH then drops
the WHOLE connection ("ieof packet referred to nonexistent channel"), failing every other
command and stream on it. Measured: 10 threads running `echo hi` on one connection hit it
dozens of times in 5 seconds.

The fix, per channel: its `transport` attribute is replaced by a stand-in that sends each
message under the transport's send lock and drops it if the channel is closed by then. The
CLOSE itself always goes out; since paramiko marks a channel closed before it sends CLOSE
through this same lock, nothing for a channel can follow its CLOSE. A dropped message was
addressed to a session the server had finished with: nothing is lost.

This touches paramiko internals (`clear_to_send*`, `_send_message`, `Channel.transport`),
all present in paramiko 3 to 5; `paramiko>=5.1,<6` is pinned and
tests/ssh/test_connection.py (test_sessions_ending_while_others_write) fails
without it.

A second race, in close: `Channel.close()` closes the OS pipe behind `fileno()` (what our
readers poll) while the transport thread may still be feeding the channel, and a feed sets
that pipe (`os.write` of one byte) unless it is already marked closed, which close() does
only after both os.close calls. A feed in between wrote to a closed descriptor: EBADF in the
transport thread, which ends the WHOLE connection ("Socket exception: Bad file descriptor");
had the number been taken again meanwhile, the byte went into someone else's file or socket.
An attached terminal streams without pause, so closing its agent channel met it often (one
run of tests/ssh/test_terminals.py in five). So each channel's close first detaches both of
its buffers from the pipe, under the buffers' own locks (the lock a feed holds while it sets
the pipe): no feed touches the pipe after that, and close() then closes it safely.
tests/ssh/test_channel_close.py fails without it.
"""

from __future__ import annotations

import time
from typing import Any

import paramiko
from paramiko.common import MSG_CHANNEL_CLOSE


def order_sends(channel: paramiko.Channel) -> paramiko.Channel:
    """Install the guards on a freshly opened channel; returns the channel."""
    transport = channel.transport
    if not isinstance(transport, _OrderedTransport):
        channel.transport = _OrderedTransport(transport, channel)
        close = channel.close

        def detached_close() -> None:
            detach_pipe(channel)
            close()

        channel.close = detached_close
    return channel


def detach_pipe(channel: paramiko.Channel) -> None:
    """No feed of the transport thread sets the channel's fileno() pipe from now on (the
    module's docstring says why); a poller on it wakes when close() closes it (POLLHUP)."""
    for buffer in (channel.in_buffer, channel.in_stderr_buffer):
        with buffer._lock:
            buffer._event = None


class _OrderedTransport:
    """The channel's view of its Transport: everything delegated but user-message sends."""

    def __init__(self, transport: paramiko.Transport, channel: paramiko.Channel) -> None:
        self._transport = transport
        self._channel = channel

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def _send_user_message(self, message: paramiko.Message) -> None:
        transport = self._transport
        if message.asbytes()[:1] == bytes([MSG_CHANNEL_CLOSE]):
            transport._send_user_message(message)
            return
        # As Transport._send_user_message (wait out a key exchange), with the closed check
        # made under the lock the CLOSE is sent under.
        give_up = time.monotonic() + transport.clear_to_send_timeout
        while True:
            transport.clear_to_send.wait(0.1)
            if not transport.active:
                return  # paramiko drops user messages on a dead connection too
            with transport.clear_to_send_lock:
                if transport.clear_to_send.is_set():
                    if not self._channel.closed:
                        transport._send_message(message)
                    return
            if time.monotonic() > give_up:
                raise paramiko.SSHException("Key-exchange timed out waiting for key negotiation")
