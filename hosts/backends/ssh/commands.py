"""Running one command on an open session channel and collecting its output, bounded.

Output is read as it arrives (the channel's stdout and stderr are both watched through one
file descriptor paramiko provides), so a chatty command never stalls on a full SSH window,
and only the first `max_output` bytes of each stream are kept.
"""

from __future__ import annotations

import select
import threading
from dataclasses import dataclass

import paramiko

# stdin up to this size is written before reading (it fits in the server's window, 2 MiB for
# an OpenSSH session); larger stdin is fed from a thread so a command that writes before it
# has read everything cannot deadlock against us.
_INLINE_STDIN = 256 * 1024
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class RunResult:
    """What a command did. `exit_code` is None when it ended without one (killed by a signal)."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool = False  # more was printed than `max_output`; the rest was dropped
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class _Capped:
    """The first `limit` bytes of a stream; counts, then drops, the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.kept = 0
        self.truncated = False

    def add(self, data: bytes) -> None:
        room = self.limit - self.kept
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        if data:
            self.parts.append(data)
            self.kept += len(data)

    def value(self) -> bytes:
        return b"".join(self.parts)


def execute(
    channel: paramiko.Channel, command: str, stdin: bytes | None, max_output: int
) -> RunResult:
    """Run `command` on a fresh session `channel` and wait for it to end.

    Never times out by itself: the caller bounds it by closing the channel from another
    thread (every wait here then returns). The caller also closes the channel afterwards.
    """
    channel.exec_command(command)
    feeder = _send_stdin(channel, stdin or b"")
    out, err = _Capped(max_output), _Capped(max_output)
    _read_until_eof(channel, out, err)
    if feeder is not None:
        feeder.join()
    status = channel.recv_exit_status()  # paramiko leaves -1 when no exit-status came
    return RunResult(
        exit_code=None if status < 0 else status,
        stdout=out.value(),
        stderr=err.value(),
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )


def _send_stdin(channel: paramiko.Channel, data: bytes) -> threading.Thread | None:
    def feed() -> None:
        try:
            if data:
                channel.sendall(data)
            channel.shutdown_write()  # EOF: a command reading stdin ends instead of waiting
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the channel closed under us: the reader sees it and reports

    if len(data) <= _INLINE_STDIN:
        feed()
        return None
    thread = threading.Thread(target=feed, name="sandhub-ssh-stdin", daemon=True)
    thread.start()
    return thread


def _read_until_eof(channel: paramiko.Channel, out: _Capped, err: _Capped) -> None:
    # channel.fileno() is readable while either stream has data, and for good once the
    # channel is closed. poll, not select: select fails on descriptors above 1024.
    poller = select.poll()
    poller.register(channel.fileno(), select.POLLIN)
    while True:
        # Checked before draining: the transport delivers data before EOF, so once EOF is
        # seen everything the command printed is already buffered.
        finished = channel.eof_received or channel.closed
        while channel.recv_ready():
            out.add(channel.recv(_CHUNK))
        while channel.recv_stderr_ready():
            err.add(channel.recv_stderr(_CHUNK))
        if finished:
            return
        poller.poll()
