"""Port streams over the sandbox agent: AgentClient.open_port's PortStream (previews).

One `port` request per stream (protocol.py documents it). Memory is bounded both ways: the
platform sends the app's data within the agent's CREDIT window, and the agent sends the app's
answer within an ACK window this side opens as its reader takes bytes, so at most
protocol.WINDOW unread bytes wait here whatever the app sends and however slowly the reader
reads (a 50 MB download through a slow client costs a window, not 50 MB).

Threads: the client's reader thread feeds the stream (on_data, finish, fail) and never blocks
here; one thread may read while another writes; close() from any thread.
"""

from __future__ import annotations

import collections
import contextlib
import json
import threading
import time
from typing import Any, Protocol

from hosts.backends.agent import protocol
from hosts.backends.agent.calls import Call
from hosts.backends.base import BackendError, PortStream

__all__ = ["OPEN_GRACE", "AgentPortStream", "port_request"]

OPEN_GRACE = 5.0  # past the connect timeout, for the agent's answer (its look at /proc)
ACK_EVERY = protocol.WINDOW // 8  # bytes read before the window is opened again


def port_request(port: int, timeout: float) -> dict[str, Any]:
    """The REQUEST body of a port stream; BackendError for a port that cannot be one."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise BackendError(f"port must be a number from 1 to 65535, not {port!r}")
    return {"op": "port", "port": port, "timeout": timeout}


class PortClient(Protocol):
    """What a stream needs of its client (client.AgentClient)."""

    def cancel(self, rid: int) -> None: ...

    def abandon(self, reason: str) -> None: ...

    def send_frame(self, packet: bytes) -> None: ...


class AgentPortStream(Call, PortStream):
    """A `port` request in flight, as a PortStream."""

    def __init__(self, client: PortClient, rid: int, port: int) -> None:
        super().__init__(client, rid)
        self.sender = client
        self.port = port
        self.what = f"port {port}"  # in errors: what the stream reaches
        self.app = f"the app on port {port}"
        self.address = ""  # where the agent connected (127.0.0.1 or ::1)
        self.settled = threading.Event()  # connected, or refused
        self._inbox = threading.Condition()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0  # bytes in _chunks
        self._taken = 0  # bytes read since the last ACK
        self._closed = self._write_closed = False

    # --- the reader thread -----------------------------------------------------------------
    def on_data(self, channel: int, chunk: bytes) -> None:
        if channel == protocol.CH_PORT_OPEN:
            self.address = str(json.loads(chunk).get("address", ""))
            self.settled.set()
            return
        if channel != protocol.CH_PORT or not chunk:
            return
        with self._inbox:
            if self._closed:
                return  # on its way before the cancel: nobody reads it
            if self._buffered + len(chunk) > protocol.WINDOW:
                # The agent runs as the sandbox's user, who could tamper with it: memory
                # here stays bounded whatever it sends.
                self.error = BackendError("the sandbox agent sent past its window")
                self._inbox.notify_all()
                return
            self._chunks.append(chunk)
            self._buffered += len(chunk)
            self._inbox.notify_all()

    def _end(self) -> None:
        super()._end()
        self.settled.set()
        with self._inbox:
            self._inbox.notify_all()

    # --- opening ---------------------------------------------------------------------------
    def wait_open(self, timeout: float) -> None:
        """Until the agent connected; its refusal (PortClosed, ...) or a BackendError."""
        if not self.settled.wait(timeout + OPEN_GRACE):
            self.close()
            raise BackendError(f"the sandbox agent did not open {self.what} within {timeout:g} s")
        if self.address:
            return
        self.close()
        if self.error is not None:
            raise self.error
        raise BackendError(f"the sandbox agent ended the stream to {self.what} unopened")

    # --- PortStream ------------------------------------------------------------------------
    def read(self, max_bytes: int = 65536, timeout: float | None = None) -> bytes:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._inbox:
            while not self._chunks:
                if self._closed:
                    return b""
                if self.error is not None:
                    raise self.error
                if self.done.is_set():
                    if self.body.get("reset"):
                        raise BackendError(f"{self.app} reset the connection")
                    return b""
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"nothing came from {self.what} in {timeout:g} s")
                self._inbox.wait(remaining)
            data = self._take(max(1, max_bytes))
            self._taken += len(data)
            ack = self._taken if self._taken >= ACK_EVERY or not self._chunks else 0
            if ack:
                self._taken = 0
        if ack and not self.done.is_set():
            # A broken stream fails the call: the next read says so.
            with contextlib.suppress(BackendError):
                self.sender.send_frame(protocol.frame(self.rid, protocol.ACK, _count(ack)))
        return data

    def _take(self, max_bytes: int) -> bytes:
        parts, size = [], 0
        while self._chunks and size < max_bytes:
            chunk = self._chunks.popleft()
            if size + len(chunk) > max_bytes:
                cut = max_bytes - size
                self._chunks.appendleft(chunk[cut:])
                chunk = chunk[:cut]
            parts.append(chunk)
            size += len(chunk)
        self._buffered -= size
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        for at in range(0, len(view), protocol.CHUNK):
            piece = bytes(view[at : at + protocol.CHUNK])
            self._reserve(len(piece))
            self.sender.send_frame(protocol.data(self.rid, protocol.CH_PORT, piece))

    def _reserve(self, size: int) -> None:
        """Wait until the agent's window has room for `size` bytes, and take it."""
        with self._cond:
            while True:
                if self._closed or self._write_closed:
                    raise BackendError(f"the stream to {self.what} is closed for writing")
                if self.done.is_set():
                    if self.error is not None:
                        raise self.error
                    raise BackendError(f"{self.app} closed the connection")
                if self._window >= size:
                    self._window -= size
                    return
                self._cond.wait(1.0)

    def close_write(self) -> None:
        with self._cond:
            if self._write_closed or self._closed:
                return
            self._write_closed = True
            self._cond.notify_all()
        if not self.done.is_set():
            end = protocol.frame(self.rid, protocol.EOF, bytes((protocol.CH_PORT,)))
            self.sender.send_frame(end)

    def close(self) -> None:
        with self._inbox:
            if self._closed:
                return
            self._closed = True
            self._chunks.clear()
            self._buffered = 0
            self._inbox.notify_all()
        with self._cond:
            self._cond.notify_all()
        if not self.done.is_set():
            # The agent closes the connection and ends the request (RESULT).
            with contextlib.suppress(Exception):
                self.sender.cancel(self.rid)

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"<AgentPortStream port {self.port} request {self.rid}>"


def _count(count: int) -> bytes:
    return count.to_bytes(4, "big")
