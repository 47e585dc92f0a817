"""Port streams (part 5 of the agent): a TCP connection to 127.0.0.1:PORT in the sandbox,
its bytes carried both ways on the agent's stream, so a preview reaches an app in a sandbox
that has no network.

Only a listener of the agent's own uid is connected to. In a Docker sandbox the loopback is
the sandbox's own; on an SSH host it is the host's, shared by the sandboxes of every team,
each with its own Unix user: a port another user listens on is not this sandbox's to open.
The kernel's socket table says who owns each socket: sock_diag over netlink (what `ss`
reads; a lookup costs ~0.05 ms), else /proc/net/tcp and tcp6 (3-5 ms a read, as it walks
every connection of the machine). The listener's owner is looked at before connecting, and
the accepted socket's after, so a listener swapped in between is caught too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING, Any

from .constants import CH_PORT, CH_PORT_OPEN, ERR_INVALID, ERR_PERMISSION, ERR_PORT_CLOSED, WINDOW
from .wire import Refusal, Request

PORT_READ = 64 * 1024  # bytes read from the app at a time
TCP_LISTEN = "0A"  # the state column of a listening socket in /proc/net/tcp
OWNER_LOOK = 0.5  # seconds to look for the accepted socket's owner after connecting
_MAPPED = b"\0" * 10 + b"\xff\xff"  # the prefix of an IPv4 address mapped into IPv6
_ANY4, _ANY6 = _MAPPED + b"\0" * 4, b"\0" * 16
# Where the app may listen, in order: IPv4 first (what apps mostly bind), then IPv6.
_LOOPBACKS = (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6))
# sock_diag over netlink (linux/sock_diag.h, inet_diag.h, netlink.h).
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY = 4, 20
_NLM_F_REQUEST, _NLM_F_DUMP, _NLMSG_ERROR, _NLMSG_DONE = 0x1, 0x300, 2, 3
_TCPF_LISTEN = 1 << 10
_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port id

if TYPE_CHECKING:  # never run: python 3.8 has no tuple[...] at run time
    # (local address, local port, remote address, remote port, state as /proc shows it, uid)
    _Row = tuple[bytes, int, bytes, int, str, int]


def op_port(request: Request) -> dict[str, Any]:
    port = request.args.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise Refusal(ERR_INVALID, f"port must be a number from 1 to 65535, not {port!r}")
    timeout = float(request.args.get("timeout") or 5.0)
    sock, address = port_connect(port, timeout)
    try:
        opened = json.dumps({"address": address}).encode()
        request.wire.send(request.wire.data(request.rid, CH_PORT_OPEN, opened))
        return PortPump(request, sock).run()
    finally:
        sock.close()


def listeners(port: int) -> list[tuple[bytes, int]]:
    """(address as 16 bytes, uid) of each TCP socket listening on the port."""
    try:
        rows = _diag(socket.AF_INET, _TCPF_LISTEN, _sockid(port, b"", 0, b""), dump=True)
        rows += _diag(socket.AF_INET6, _TCPF_LISTEN, _sockid(port, b"", 0, b""), dump=True)
    except OSError:  # no sock_diag here (a sandbox runtime without it): the slow way
        rows = tcp_sockets()
    return [(row[0], row[5]) for row in rows if row[4] == TCP_LISTEN and row[1] == port]


def accepted_by(sock: socket.socket, family: int, address: str, port: int) -> int | None:
    """The uid owning the far end of a fresh connection (the app's accepted socket); None if
    it cannot be told: gone already (the app closed it), or a time-wait socket, whose uid the
    kernel gives as 0."""
    here = sock.getsockname()
    me, far = (_as16(here[0]), here[1]), (_as16(address), port)
    give_up = time.monotonic() + OWNER_LOOK
    while True:
        try:  # one lookup in the kernel's table of connections
            key = _sockid(port, _packed(family, address), here[1], _packed(family, here[0]))
            rows = _diag(family, 0xFFFFFFFF, key, dump=False)
        except OSError:
            rows = tcp_sockets()
        for row in rows:
            if (row[0], row[1]) == far and (row[2], row[3]) == me and row[4] != TCP_LISTEN:
                return row[5] if row[5] != 0 or os.getuid() == 0 else None
        if time.monotonic() > give_up:
            return None
        time.sleep(0.001)


def _packed(family: int, address: str) -> bytes:
    return socket.inet_pton(family, address)


def _sockid(sport: int, src: bytes, dport: int, dst: bytes) -> bytes:
    """struct inet_diag_sockid: ports, addresses, no interface, no cookie."""
    return struct.pack("!HH16s16s", sport, dport, src, dst) + struct.pack("=I", 0) + b"\xff" * 8


def _diag(family: int, states: int, sockid: bytes, dump: bool) -> list[_Row]:
    """TCP sockets from the kernel's sock_diag (what `ss` reads): a dump of the sockets in
    `states`, or the one socket `sockid` names. Fast where /proc/net/tcp walks every
    connection of the machine (milliseconds on a busy host, even from an empty namespace)."""
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, states) + sockid
    flags = _NLM_F_REQUEST | (_NLM_F_DUMP if dump else 0)
    header = _NLMSG.pack(_NLMSG.size + len(request), _SOCK_DIAG_BY_FAMILY, flags, 1, 0)
    rows: list[_Row] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as link:
        link.settimeout(5.0)
        link.send(header + request)
        while True:
            data, at = link.recv(1 << 16), 0
            while at + _NLMSG.size <= len(data):
                length, kind = _NLMSG.unpack_from(data, at)[:2]
                body = data[at + _NLMSG.size : at + length]
                at += (length + 3) & ~3
                if kind == _NLMSG_DONE:
                    return rows
                if kind == _NLMSG_ERROR:
                    error = -struct.unpack_from("=i", body)[0]
                    if error in (0, errno.ENOENT):  # the one socket asked for: none such
                        return rows
                    raise OSError(error, os.strerror(error))
                rows.append(_diag_row(body))
            if not dump:
                return rows


def _diag_row(body: bytes) -> _Row:
    """struct inet_diag_msg: family, state, ..., the sockid, ..., uid."""
    family, state = body[0], body[1]
    sport, dport, src, dst = struct.unpack_from("!HH16s16s", body, 4)
    uid = struct.unpack_from("=I", body, 4 + 48 + 12)[0]
    if family == socket.AF_INET:
        src, dst = _MAPPED + src[:4], _MAPPED + dst[:4]
    return src, sport, dst, dport, format(state, "02X"), uid


def tcp_sockets() -> list[_Row]:
    """Every TCP socket of this network namespace, from /proc/net/tcp and tcp6."""
    rows, readable = [], False
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as handle:
                lines = handle.readlines()[1:]
        except OSError:  # no IPv6 in this kernel: tcp6 is missing
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 7:
                local, remote = _endpoint(fields[1]), _endpoint(fields[2])
                rows.append((local[0], local[1], remote[0], remote[1], fields[3], int(fields[7])))
    if not readable:
        raise Refusal(ERR_PERMISSION, "cannot tell who listens on the port: /proc/net/tcp unread")
    return rows


def _endpoint(text: str) -> tuple[bytes, int]:
    address, port = text.split(":")
    raw = bytes.fromhex(address)
    if sys.byteorder == "little":  # the kernel prints each 32-bit word in the host's order
        raw = b"".join(raw[at : at + 4][::-1] for at in range(0, len(raw), 4))
    return (_MAPPED + raw if len(raw) == 4 else raw), int(port, 16)


def _as16(address: str) -> bytes:
    if ":" in address:
        return socket.inet_pton(socket.AF_INET6, address)
    return _MAPPED + socket.inet_pton(socket.AF_INET, address)


def port_connect(port: int, timeout: float) -> tuple[socket.socket, str]:
    """A connected socket to the agent's own listener on the port, and the address used."""
    uid, foreign = os.getuid(), False
    listening = listeners(port)
    for address, family in _LOOPBACKS:
        target = _as16(address)
        # A connection to 127.0.0.1 reaches a listener on it, on 0.0.0.0 or on :: (dual
        # stack); one to ::1, a listener on ::1 or on ::.
        covering = {target, _ANY6} | ({_ANY4} if target.startswith(_MAPPED) else set())
        owners = {owner for local, owner in listening if local in covering}
        if not owners:
            continue
        if owners != {uid}:
            foreign = True
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect((address, port))
        except OSError as exc:  # refused: it stopped listening meanwhile
            sock.close()
            if isinstance(exc, ConnectionRefusedError):
                continue
            raise Refusal(ERR_PORT_CLOSED, f"cannot connect to port {port}: {exc}") from None
        if accepted_by(sock, family, address, port) not in (None, uid):
            sock.close()  # another user's listener took the port between the look and now
            foreign = True
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock, address
    if foreign:
        raise Refusal(
            ERR_PORT_CLOSED, f"port {port} is not this sandbox's: another user listens on it"
        )
    raise Refusal(ERR_PORT_CLOSED, f"nothing listens on port {port} in the sandbox")


class PortPump:
    """The bytes of one connection both ways, in one thread that never blocks on either side:
    client data is written as the app takes it (CREDIT as it goes), app data is read while
    the client's window (ACK) has room."""

    def __init__(self, request: Request, sock: socket.socket) -> None:
        self.request, self.sock = request, sock
        self.sent = self.received = 0
        self.pending = memoryview(b"")  # client data the app has not taken yet
        self.app_closed = self.reset = self.write_failed = self.shut = False

    def run(self) -> dict[str, Any]:
        request, sock = self.request, self.sock
        sock.setblocking(False)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        with request.cond:
            request.wake_fd = wake_w
        try:
            return self.pump(wake_r)
        finally:
            with request.cond:
                request.wake_fd = -1
            os.close(wake_r)
            os.close(wake_w)

    def pump(self, wake_r: int) -> dict[str, Any]:
        request, sock = self.request, self.sock
        poller = select.poll()
        poller.register(wake_r, select.POLLIN)
        registered = False
        while not request.cancelled:
            self.take_inbound()
            room = WINDOW - (self.sent - request.acked)
            mask = (select.POLLIN if room > 0 else 0) | (select.POLLOUT if self.pending else 0)
            if mask:
                poller.register(sock, mask)  # registering again modifies
            elif registered:
                poller.unregister(sock)
            registered = bool(mask)
            events = dict(poller.poll())
            if wake_r in events:
                with contextlib.suppress(OSError):
                    os.read(wake_r, 4096)
            ready = events.get(sock.fileno(), 0)
            if ready & (select.POLLIN | select.POLLHUP | select.POLLERR) and room > 0:
                self.read_app(room)
                if self.app_closed:
                    break
            if ready & (select.POLLOUT | select.POLLHUP | select.POLLERR) and self.pending:
                self.write_app()
        cancelled = request.cancelled and not self.app_closed
        return {
            "sent": self.sent,
            "received": self.received,
            "reset": self.reset,
            "cancelled": cancelled,
        }

    def take_inbound(self) -> None:
        """The client's next chunk, or its end of input passed on as a half-close."""
        request = self.request
        with request.cond:
            if not self.pending and request.inbound:
                self.pending = memoryview(request.inbound.popleft())
            at_end = not self.pending and request.eof and not request.inbound
        if self.write_failed and self.pending:  # the app stopped reading: drop, credit back
            count, self.pending = len(self.pending), memoryview(b"")
            request.credit(count)
        if at_end and not self.shut:
            self.shut = True
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_WR)

    def read_app(self, room: int) -> None:
        try:
            chunk = self.sock.recv(min(PORT_READ, room))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset by the app
            self.app_closed = self.reset = True
            return
        if not chunk:
            self.app_closed = True
            return
        self.sent += len(chunk)
        wire = self.request.wire
        wire.send(wire.data(self.request.rid, CH_PORT, chunk))

    def write_app(self) -> None:
        try:
            count = self.sock.send(self.pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the app closed its reading side: the rest is dropped
            self.write_failed = True
            self.request.credit(len(self.pending))
            self.pending = memoryview(b"")
            return
        self.pending = self.pending[count:]
        self.received += count
        self.request.credit(count)
