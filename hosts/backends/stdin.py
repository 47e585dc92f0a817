"""A command's standard input as it comes: one thread writes (E2B's SendInput, say), the
backend's pump reads, until close() (end of input). Bounded, so a writer faster than the
command reads waits instead of filling memory."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator

__all__ = ["StdinPipe", "StdinClosed"]

MAX_BUFFERED = 4 * 1024 * 1024  # bytes written and not yet taken by the pump


class StdinClosed(Exception):
    """Written after close(), or after the command ended."""


class StdinPipe:
    def __init__(self, max_buffered: int = MAX_BUFFERED) -> None:
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._max = max_buffered
        self._closed = False
        self._changed = threading.Condition()

    def write(self, data: bytes, timeout: float = 30.0) -> None:
        """Queue data for the command; waits while too much is queued (StdinClosed once closed,
        TimeoutError if the command takes none of it for `timeout` seconds)."""
        if not data:
            return
        with self._changed:
            if not self._changed.wait_for(
                lambda: self._closed or self._buffered + len(data) <= max(self._max, len(data)),
                timeout,
            ):
                raise TimeoutError("the command has not read its input for a while")
            if self._closed:
                raise StdinClosed("the command's input is closed")
            self._chunks.append(bytes(data))
            self._buffered += len(data)
            self._changed.notify_all()

    def close(self) -> None:
        """End of input: the command reads EOF once it has what was written."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes of what is written (as a binary file's read), waiting for some;
        b"" once closed and drained: the backend's pump reads it as it reads an upload."""
        with self._changed:
            self._changed.wait_for(lambda: self._chunks or self._closed)
            if not self._chunks:
                return b""
            chunk = self._chunks.popleft()
            if 0 < size < len(chunk):
                chunk, rest = chunk[:size], chunk[size:]
                self._chunks.appendleft(rest)
            self._buffered -= len(chunk)
            self._changed.notify_all()
            return chunk

    def chunks(self) -> Iterator[bytes]:
        """What is written, as it comes, until close() (for the backend's pump)."""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._chunks or self._closed)
                if not self._chunks:
                    return
                chunk = self._chunks.popleft()
                self._buffered -= len(chunk)
                self._changed.notify_all()
            yield chunk
