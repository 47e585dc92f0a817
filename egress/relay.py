"""Byte transport for the proxy: raw sockets relayed both ways with large buffers, and
channels (plain or TLS over memory BIOs) the HTTP loop reads and writes.

Sockets are non-blocking and driven by the event loop's sock_* methods: no stream objects
between the kernel and the relay, one reusable buffer per direction.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import socket
import ssl
from collections.abc import Awaitable, Callable

CHUNK = 256 * 1024
SPLICE = hasattr(os, "splice")
SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
F_SETPIPE_SZ = 1031  # linux/fcntl.h
PIPE_SIZE = 1024 * 1024
HEAD_TIMEOUT = 30.0  # seconds for a client to send its request head or ClientHello


def tune(sock: socket.socket) -> None:
    sock.setblocking(False)
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def close_quietly(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.close()


async def pump(source: socket.socket, destination: socket.socket) -> None:
    """Copy until `source` ends, then end `destination`'s sending side (half-close)."""
    if SPLICE:
        try:
            await splice_pump(source, destination)
            return
        except SpliceUnsupported:
            pass
    await copy_pump(source, destination)


async def copy_pump(source: socket.socket, destination: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    while True:
        count = await loop.sock_recv_into(source, buffer)
        if not count:
            break
        await loop.sock_sendall(destination, view[:count])
    with contextlib.suppress(OSError):
        destination.shutdown(socket.SHUT_WR)


class SpliceUnsupported(Exception):
    """splice(2) refused these descriptors before any byte moved."""


async def splice_pump(source: socket.socket, destination: socket.socket) -> None:
    """The kernel moves the bytes (socket -> pipe -> socket): no copy through Python, which
    is what keeps a tunnel near the direct rate. Half-closes like copy_pump."""
    await splice_bytes(source, destination, None)
    with contextlib.suppress(OSError):
        destination.shutdown(socket.SHUT_WR)


async def splice_bytes(source: socket.socket, destination: socket.socket, limit: int | None) -> int:
    """Move bytes until `source` ends or `limit` bytes moved; the count moved.
    SpliceUnsupported when the kernel refuses these descriptors before the first byte."""
    loop = asyncio.get_running_loop()
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_end, F_SETPIPE_SZ, PIPE_SIZE)
    moved = 0
    try:
        while limit is None or moved < limit:
            want = PIPE_SIZE if limit is None else min(PIPE_SIZE, limit - moved)
            try:
                count = os.splice(source.fileno(), write_end, want, flags=SPLICE_FLAGS)
            except BlockingIOError:
                await ready(loop, source, writing=False)
                continue
            except OSError as error:
                if error.errno == errno.EINVAL and not moved:
                    raise SpliceUnsupported() from error
                raise
            if not count:
                break
            moved += count
            while count:
                try:
                    count -= os.splice(read_end, destination.fileno(), count, flags=SPLICE_FLAGS)
                except BlockingIOError:
                    await ready(loop, destination, writing=True)
    finally:
        os.close(read_end)
        os.close(write_end)
    return moved


async def ready(loop: asyncio.AbstractEventLoop, sock: socket.socket, *, writing: bool) -> None:
    """Until `sock` can be read (or written) without blocking."""
    waiter: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    if writing:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await waiter
    finally:
        if writing:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


async def relay(
    client: socket.socket,
    upstream: socket.socket,
    prelude: Callable[[], Awaitable[bytes]] | None = None,
) -> None:
    """Both directions until both ended (or one failed). `prelude` reads what the client
    sent first and returns the bytes to forward before the rest (it raises to refuse);
    upstream's bytes flow to the client meanwhile (protocols where the server speaks first).
    The caller closes the sockets."""

    async def upwards() -> None:
        if prelude is not None:
            first = await prelude()
            if first:
                await asyncio.get_running_loop().sock_sendall(upstream, first)
        await pump(client, upstream)

    tasks = [asyncio.ensure_future(upwards()), asyncio.ensure_future(pump(upstream, client))]
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()  # a failed direction ends both (raises here)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Channel:
    """A plain connection the HTTP loop talks over; `prefix` = bytes already read from it."""

    def __init__(self, sock: socket.socket, prefix: bytes = b"") -> None:
        self.sock = sock
        self._prefix = prefix
        self._loop = asyncio.get_running_loop()

    async def recv(self) -> bytes:
        """Next bytes; b"" at the end."""
        if self._prefix:
            data, self._prefix = self._prefix, b""
            return data
        return await self._loop.sock_recv(self.sock, CHUNK)

    async def send(self, data: bytes) -> None:
        await self._loop.sock_sendall(self.sock, data)

    def close(self) -> None:
        close_quietly(self.sock)


class TlsChannel(Channel):
    """TLS over a socket through memory BIOs, so bytes already read (a ClientHello the proxy
    looked at) can be handed to the handshake."""

    def __init__(
        self,
        sock: socket.socket,
        tls: ssl.SSLObject,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
    ) -> None:
        super().__init__(sock)
        self._tls = tls
        self._incoming = incoming
        self._outgoing = outgoing

    @classmethod
    async def handshake(
        cls,
        sock: socket.socket,
        context: ssl.SSLContext,
        *,
        server_hostname: str | None = None,
        prefix: bytes = b"",
    ) -> TlsChannel:
        """Server side when server_hostname is None, else client side (verifying as the
        context says). Raises ssl.SSLError or ConnectionError."""
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        if prefix:
            incoming.write(prefix)
        tls = context.wrap_bio(
            incoming, outgoing, server_side=server_hostname is None, server_hostname=server_hostname
        )
        channel = cls(sock, tls, incoming, outgoing)
        await channel._run(tls.do_handshake)
        return channel

    async def _run(self, step: Callable[[], object]) -> object:
        while True:
            try:
                result = step()
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self._loop.sock_recv(self.sock, CHUNK)
                if not data:
                    raise ConnectionResetError("TLS peer closed the connection") from None
                self._incoming.write(data)
                continue
            await self._flush()
            return result

    async def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending:
            await self._loop.sock_sendall(self.sock, pending)

    async def recv(self) -> bytes:
        while True:
            try:
                data = self._tls.read(CHUNK)
            except ssl.SSLWantReadError:
                await self._flush()
                received = await self._loop.sock_recv(self.sock, CHUNK)
                if not received:
                    return b""  # the peer closed without close_notify: the end all the same
                self._incoming.write(received)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            await self._flush()
            return data

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = self._tls.write(view)
            view = view[written:]
            await self._flush()
