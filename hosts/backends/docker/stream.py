"""The engine's exec streams: one hijacked connection per exec, its frames taken apart.

With tty off, the engine multiplexes an exec's stdout and stderr on the connection in frames
of an 8-byte header (stream 1 = stdout, 2 = stderr; 4-byte big-endian length) and a payload.
Every reader of an exec (commands, tar streams, the agent's transport) reads through this one
class. Reads go through the HTTP response's buffered reader when there is one: it may already
hold the first output bytes, read along with the response headers, which reading the raw
socket (as the SDK's own stream helpers do) would lose.
"""

from __future__ import annotations

import contextlib
import io
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from hosts.backends.fallback.primitive import Deadline

__all__ = ["Deadline", "ExecStream"]

_READ_SIZE = 64 * 1024


class ExecStream:
    """Reads a hijacked exec connection and splits the engine's multiplexed frames."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        response = getattr(sock, "_response", None)
        fp = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
        self._reader = fp if isinstance(fp, io.BufferedReader) else None
        self._response = response
        # The object whose timeout bounds a blocking read, and that writes go to (socket,
        # SSL socket, SSH channel).
        self.timed = getattr(sock, "_sock", sock)
        self._header = bytearray()
        self._kind = 0
        self._left = 0
        self._closed = False

    def frames(self, deadline: Callable[[], float]) -> Iterator[tuple[int, bytes]]:
        """(stream, chunk) pairs until EOF; `deadline()` is asked before each read."""
        while True:
            data = self.read(deadline())
            if not data:
                return
            yield from self.split(data)

    def read(self, deadline: float | None = None) -> bytes:
        """The next bytes of the connection (frames and all); b"" at its end. With a
        deadline, Deadline once it passes; without, the connection's own timeout holds."""
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Deadline
            self.timed.settimeout(remaining)
        try:
            if self._reader is not None:
                return self._reader.read1(_READ_SIZE)
            if hasattr(self.sock, "recv"):
                return self.sock.recv(_READ_SIZE)
            return self.sock.read(_READ_SIZE) or b""
        except TimeoutError as exc:
            raise Deadline from exc

    def split(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """(stream, payload piece) of the frames in `data`, however the reads cut them."""
        view = memoryview(data)
        while view:
            if self._left == 0:
                need = 8 - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) < 8:
                    return
                self._kind = self._header[0]
                self._left = int.from_bytes(self._header[4:8], "big")
                self._header.clear()
                continue
            piece = view[: self._left]
            view = view[len(piece) :]
            self._left -= len(piece)
            yield self._kind, bytes(piece)

    def close(self) -> None:
        # The connection was hijacked: it can never go back to the pool, so close it for good.
        # shutdown first: it ends a read blocked in another thread.
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.timed.shutdown(socket.SHUT_RDWR)
        for closable in (self._response, self.sock, self.timed):
            with contextlib.suppress(Exception):
                if closable is not None:
                    closable.close()
