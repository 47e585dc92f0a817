"""The egress proxy: one TCP listener for explicit (CONNECT, absolute-form HTTP) and
transparent (TLS by SNI, HTTP by Host) connections, and a UDP DNS server.

Every destination is checked the same way (egress.gate.Gate.check): the sandbox's mode and
rules, then the addresses the name resolves to (private, loopback, ... refused unless the
operator mapped the name or an admin allowed the range), then a connection to the checked
address itself, so a second resolution can never point elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import ssl
from collections import Counter

from egress import redirect
from egress.bookkeeping import PolicyCache, RefusalCounts
from egress.ca import CertificateAuthority
from egress.dns import DnsServer
from egress.gate import Gate
from egress.http import MAX_HEAD, Refused, plain_answer
from egress.policy import PolicySource
from egress.ranges import local_addresses
from egress.relay import CHUNK, HEAD_TIMEOUT, Channel, close_quietly, tune
from egress.resolver import Resolver
from egress.session import EXPLICIT, TRANSPARENT, HttpSession
from egress.tunnel import connect_tunnel, transparent_tls

log = logging.getLogger(__name__)
TLS_HANDSHAKE = 0x16


class EgressProxy:
    def __init__(
        self,
        source: PolicySource,
        *,
        resolver: Resolver,
        ca: CertificateAuthority,
        upstream_cafile: str | None = None,
        report_seconds: float = 5.0,
        policy_ttl: float = 2.0,
    ) -> None:
        self.source = source
        self.resolver = resolver
        self.ca = ca
        self.policies = PolicyCache(source, policy_ttl)
        self.refusals = RefusalCounts()
        self.upstream_context = ssl.create_default_context()
        if upstream_cafile:
            self.upstream_context.load_verify_locations(upstream_cafile)
        self.upstream_context.set_alpn_protocols(["http/1.1"])
        self.per_sandbox: Counter[str] = Counter()  # open connections per sandbox id
        self._report_seconds = report_seconds
        self._connections: set[asyncio.Task[None]] = set()
        self._listener: socket.socket | None = None
        self._dns: DnsServer | None = None
        self._background: list[asyncio.Task[None]] = []
        self.port = 0
        self.dns_port = 0

    @property
    def active_connections(self) -> int:
        return len(self._connections)

    async def start(self, host: str, port: int, dns_host: str, dns_port: int) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(local_addresses)  # read this machine's addresses once, now
        raise_open_files_limit()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=1024)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        dns_server = DnsServer(self.policies.by_address, self.refusals.add)
        self._dns = dns_server
        transport, _ = await loop.create_datagram_endpoint(
            lambda: dns_server, local_addr=(dns_host, dns_port)
        )
        self.dns_port = transport.get_extra_info("sockname")[1]
        self._background = [
            asyncio.ensure_future(self._accept()),
            asyncio.ensure_future(self._report_periodically()),
        ]

    async def stop(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        close_quietly(self._listener)
        if self._dns is not None:
            await self._dns.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self.report()

    async def report(self) -> None:
        """Hand the refusals counted since the last report to the source."""
        counts = self.refusals.take()
        if counts:
            try:
                await asyncio.to_thread(self.source.report, counts)
            except Exception:
                log.exception("egress: reporting %d refusal counts failed", len(counts))

    async def _report_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._report_seconds)
            await self.report()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            try:
                sock, peer = await loop.sock_accept(self._listener)
            except OSError as error:  # EMFILE and the like: keep serving the others
                log.warning("egress: accept failed: %s", error)
                await asyncio.sleep(0.1)
                continue
            tune(sock)
            task = asyncio.ensure_future(self._serve(sock, str(peer[0])))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, sock: socket.socket, peer: str) -> None:
        gate = Gate(self, peer)
        try:
            await self._dispatch(sock, gate)
        except (OSError, ssl.SSLError, TimeoutError, EOFError):
            pass  # a peer went away or broke the protocol: nothing to answer
        except Exception:
            log.exception("egress: connection from %s failed", peer)
        finally:
            gate.release()
            close_quietly(sock)

    async def _dispatch(self, sock: socket.socket, gate: Gate) -> None:
        """Tell the kind of connection by its first bytes."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(HEAD_TIMEOUT):
            first = await loop.sock_recv(sock, CHUNK)
            if not first:
                return
            data = first if first[0] == TLS_HANDSHAKE else await read_head(sock, first)
        if first[0] == TLS_HANDSHAKE:
            gate.transparent = True
            await transparent_tls(gate, sock, first)
            return
        if data is None:
            refusal = Refused(431, "sandhub egress: the request head is larger than 64 KiB")
            await loop.sock_sendall(sock, plain_answer(refusal))
            return
        head_end = data.index(b"\r\n\r\n") + 4
        if data.split(b" ", 1)[0] == b"CONNECT":
            await connect_tunnel(gate, sock, data[:head_end], data[head_end:])
            return
        target = data.split(b" ", 2)[1] if data.count(b" ") >= 2 else b""
        mode = EXPLICIT if target[:7].lower() == b"http://" else TRANSPARENT
        gate.transparent = mode == TRANSPARENT
        default_port = redirect.original_port(sock) or 80
        session = HttpSession(gate, Channel(sock, data), mode, default_port=default_port)
        await session.run()


def raise_open_files_limit() -> None:
    """A tunnel holds two sockets and two pipes: the usual soft limit of 1024 descriptors
    would stop the proxy near 170 tunnels. Up to the hard limit (no privilege needed)."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def read_head(sock: socket.socket, data: bytes) -> bytes | None:
    """Bytes up to and past the end of the request head; None when the head exceeds
    MAX_HEAD. EOFError when the client leaves first."""
    loop = asyncio.get_running_loop()
    buffer = bytearray(data)
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > MAX_HEAD:
            return None
        more = await loop.sock_recv(sock, CHUNK)
        if not more:
            raise EOFError("client closed before its request head ended")
        buffer += more
    if buffer.index(b"\r\n\r\n") + 4 > MAX_HEAD:
        return None
    return bytes(buffer)
