"""TLS and tunnels: CONNECT (explicit), TLS by SNI (transparent), and the interception of
TLS for hosts a secret is bound to. Every other TLS connection is relayed untouched: the
client sees the upstream's own certificate."""

from __future__ import annotations

import asyncio
import socket
import ssl

import h11

from egress import redirect
from egress.gate import Gate
from egress.http import MAX_HEAD, Refused, plain_answer, split_host
from egress.policy import SandboxPolicy, normalize_host
from egress.relay import CHUNK, HEAD_TIMEOUT, TlsChannel, close_quietly, relay
from egress.session import INTERCEPTED, HttpSession
from egress.tls import Hello, NotClientHello, parse_client_hello

ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


class TunnelRefused(Exception):
    """Inside a tunnel: the connection is closed (already counted)."""


def parse_head(head: bytes) -> h11.Request:
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    connection.receive_data(head)
    try:
        event = connection.next_event()
    except h11.RemoteProtocolError as error:
        raise Refused(400, "sandhub egress: bad request") from error
    if not isinstance(event, h11.Request):
        raise Refused(400, "sandhub egress: bad request")
    return event


async def connect_tunnel(gate: Gate, sock: socket.socket, head: bytes, rest: bytes) -> None:
    """CONNECT host:port: checked, connected, answered 200, then relayed (or intercepted
    when a secret is bound to the host)."""
    loop = asyncio.get_running_loop()
    try:
        request = parse_head(head)
        host, port = split_host(request.target.decode("ascii", "replace"), 443)
        authorization = next((v for n, v in request.headers if n == b"proxy-authorization"), None)
        policy = await gate.sandbox(authorization)
        upstream = await gate.open(policy, host, port)
    except Refused as refusal:
        await loop.sock_sendall(sock, plain_answer(refusal))
        return
    try:
        await loop.sock_sendall(sock, ESTABLISHED)
        if policy.secrets_for(host):
            await intercept(gate, policy, sock, upstream, host, port, rest, checked_sni=False)
            return

        async def hello_first() -> bytes:
            data, hello = await read_hello(sock, rest)
            check_sni(gate, policy, hello, host, port)
            return data

        await relay(sock, upstream, hello_first)
    except TunnelRefused:
        pass
    finally:
        close_quietly(upstream)


async def transparent_tls(gate: Gate, sock: socket.socket, first: bytes) -> None:
    """A client that connected to what DNS told it (the gateway), redirected here: the
    ClientHello's server name says where it meant to go."""
    try:
        policy = await gate.by_address()
    except Refused:  # past its connections limit (counted)
        return
    if policy is None:
        return
    async with asyncio.timeout(HEAD_TIMEOUT):
        data, hello = await read_hello(sock, first)
    port = redirect.original_port(sock) or 443
    if hello is None or not hello.sni:
        gate.count(policy, "-", port, "no_sni")
        return
    host = hello.sni
    try:
        upstream = await gate.open(policy, host, port)
    except Refused:
        return
    try:
        if policy.secrets_for(host):
            await intercept(gate, policy, sock, upstream, host, port, data, checked_sni=True)
        else:

            async def already_read() -> bytes:
                return data

            await relay(sock, upstream, already_read)
    except TunnelRefused:
        pass
    finally:
        close_quietly(upstream)


async def read_hello(sock: socket.socket, data: bytes) -> tuple[bytes, Hello | None]:
    """The bytes read and the ClientHello they start with (None: not TLS, or the client
    ended first)."""
    loop = asyncio.get_running_loop()
    buffer = bytearray(data)
    while True:
        if buffer:
            try:
                hello = parse_client_hello(bytes(buffer))
            except NotClientHello:
                return bytes(buffer), None
            if hello is not None:
                return bytes(buffer), hello
        more = await loop.sock_recv(sock, CHUNK)
        if not more:
            return bytes(buffer), None
        buffer += more


def check_sni(gate: Gate, policy: SandboxPolicy, hello: Hello | None, host: str, port: int) -> None:
    """A tunnel to one name must not carry TLS for another (domain fronting past the list)."""
    if hello is not None and hello.sni and normalize_host(hello.sni) != normalize_host(host):
        gate.count(policy, host, port, "sni_mismatch")
        raise TunnelRefused()


async def intercept(
    gate: Gate,
    policy: SandboxPolicy,
    sock: socket.socket,
    upstream: socket.socket,
    host: str,
    port: int,
    prefix: bytes,
    *,
    checked_sni: bool,
) -> None:
    """TLS terminated on both sides (a leaf from the deployment CA towards the client, the
    upstream's certificate verified) so the HTTP loop can put the secrets on requests."""
    proxy = gate.proxy
    data, hello = await read_hello(sock, prefix)
    if hello is None:
        return  # secrets are bound to HTTPS: anything else through this tunnel is refused
    if not checked_sni:
        check_sni(gate, policy, hello, host, port)
    try:
        server = await TlsChannel.handshake(upstream, proxy.upstream_context, server_hostname=host)
    except ssl.SSLError:
        gate.count(policy, host, port, "upstream_tls")
        return
    client = await TlsChannel.handshake(sock, proxy.ca.server_context(host), prefix=data)
    session = HttpSession(gate, client, INTERCEPTED, upstream=server, host=host, policy=policy)
    await session.run()
