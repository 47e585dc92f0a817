"""One client connection's way through the proxy: which sandbox it is, whether a destination
is allowed, and a connection to the checked address. Refusals are counted here."""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import socket
import ssl
from collections import Counter
from typing import Protocol

import h11

from egress.bookkeeping import PolicyCache, RefusalCounts
from egress.ca import CertificateAuthority
from egress.http import Refused
from egress.policy import SandboxPolicy, is_ip_literal, normalize_host
from egress.ranges import Network, parse_ranges, refused_address
from egress.relay import Channel, close_quietly, tune
from egress.resolver import Resolver

CONNECT_TIMEOUT = 10.0
MAX_PER_SANDBOX = 256
AUTHENTICATE = (("Proxy-Authenticate", 'Basic realm="sandhub"'),)


class ProxyState(Protocol):
    """What a connection uses of the proxy (egress.server.EgressProxy)."""

    policies: PolicyCache
    refusals: RefusalCounts
    resolver: Resolver
    ca: CertificateAuthority
    upstream_context: ssl.SSLContext
    per_sandbox: Counter[str]  # open connections per sandbox id


class Gate:
    def __init__(self, proxy: ProxyState, peer: str) -> None:
        self.proxy = proxy
        self.peer = peer
        self.transparent = False  # found by source address only (no credentials)
        self._slot: str | None = None  # the sandbox this connection counts against

    # --- who is asking
    async def authorize(self, request: h11.Request) -> SandboxPolicy:
        header = None
        if not self.transparent:
            header = next((v for n, v in request.headers if n == b"proxy-authorization"), None)
        return await self.sandbox(header)

    async def sandbox(self, authorization: bytes | None) -> SandboxPolicy:
        """The sandbox behind this connection (Refused 407 when none is; 429 past its
        connection limit). Credentials must agree with the source address's sandbox."""
        by_address = await self.proxy.policies.by_address(self.peer)
        policy = by_address
        if authorization is not None:
            credentials = basic_credentials(authorization)
            policy = await self.proxy.policies.by_token(*credentials) if credentials else None
            if policy and by_address and by_address.sandbox_id != policy.sandbox_id:
                policy = None  # another sandbox's credentials
        if policy is None:
            raise Refused(
                407,
                "sandhub egress: proxy authentication required "
                "(user: the sandbox id, password: its proxy token)",
                AUTHENTICATE,
            )
        self._take_slot(policy)
        return policy

    async def by_address(self) -> SandboxPolicy | None:
        policy = await self.proxy.policies.by_address(self.peer)
        if policy is not None:
            self._take_slot(policy)
        return policy

    def _take_slot(self, policy: SandboxPolicy) -> None:
        if self._slot == policy.sandbox_id:
            return
        self.release()
        if self.proxy.per_sandbox[policy.sandbox_id] >= MAX_PER_SANDBOX:
            self.count(policy, "*", 0, "too_many_connections")
            raise Refused(429, "sandhub egress: too many open connections for this sandbox")
        self.proxy.per_sandbox[policy.sandbox_id] += 1
        self._slot = policy.sandbox_id

    def release(self) -> None:
        if self._slot is not None:
            self.proxy.per_sandbox[self._slot] -= 1
            if self.proxy.per_sandbox[self._slot] <= 0:
                del self.proxy.per_sandbox[self._slot]
            self._slot = None

    # --- where it may go
    def count(self, policy: SandboxPolicy, host: str, port: int, reason: str) -> None:
        self.proxy.refusals.add(policy.sandbox_id, f"{host}:{port}", reason)

    async def check(self, policy: SandboxPolicy, host: str, port: int) -> list[str]:
        """The addresses `host` may be reached at (Refused, counted, otherwise)."""
        host = normalize_host(host)
        where = f"{host}:{port}"
        if not policy.allows(host, port):
            if policy.mode == "allowlist" and is_ip_literal(host):
                self.count(policy, host, port, "raw_ip")
                raise Refused(
                    403, f"sandhub egress: {where} is a raw IP address; the allow-list names hosts"
                )
            self.count(policy, host, port, "not_allowed")
            raise Refused(
                403,
                f"sandhub egress: {where} is not on this sandbox's allow-list (mode {policy.mode})",
            )
        resolver = self.proxy.resolver
        addresses = await asyncio.to_thread(resolver.resolve, host)
        if not addresses:
            self.count(policy, host, port, "unresolvable")
            raise Refused(502, f"sandhub egress: {host} does not resolve")
        if not resolver.trusted(host):
            allowed = allowed_networks(policy.allowed_ranges)
            if any(refused_address(address, allowed) for address in addresses):
                self.count(policy, host, port, "private_address")
                raise Refused(
                    403, f"sandhub egress: {where} resolves to an address sandboxes may not reach"
                )
        return addresses

    async def open(self, policy: SandboxPolicy, host: str, port: int) -> socket.socket:
        """A connected socket to a checked address of host:port (Refused 403/502)."""
        addresses = await self.check(policy, host, port)
        loop = asyncio.get_running_loop()
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            tune(sock)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    await loop.sock_connect(sock, (address, port))
            except (OSError, TimeoutError):
                close_quietly(sock)
                continue
            except BaseException:
                close_quietly(sock)
                raise
            return sock
        raise Refused(502, f"sandhub egress: could not connect to {host}:{port}")

    async def connect(self, policy: SandboxPolicy, host: str, port: int) -> Channel:
        return Channel(await self.open(policy, host, port))


def basic_credentials(header: bytes) -> tuple[str, str] | None:
    """(user, password) of a `Basic` Proxy-Authorization value; None if it is not one."""
    scheme, _, encoded = header.strip().partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        user, colon, password = base64.b64decode(encoded.strip(), validate=True).partition(b":")
        if not colon:
            return None
        return user.decode(), password.decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


@functools.lru_cache(maxsize=256)
def allowed_networks(cidrs: tuple[str, ...]) -> tuple[Network, ...]:
    return parse_ranges(cidrs)
