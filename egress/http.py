"""HTTP/1.1 through the proxy (h11 on both sides): absolute-form requests of explicit proxy
clients, origin-form requests of transparent ones, and requests inside TLS the proxy
intercepts. Each request is checked, then forwarded with bodies streamed chunk by chunk.

Secrets are put in request HEADERS only (the bound header, and placeholders inside any header
value), never in bodies: a body is the sandbox's data, often echoed back by servers, and
rewriting it would change lengths and signatures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import h11

from egress.policy import BoundSecret, SandboxPolicy, normalize_host
from egress.relay import Channel

MAX_HEAD = 64 * 1024
# Meant for one hop only (the proxy's own headers among them); never forwarded.
HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"proxy-authorization",
    b"proxy-authenticate",
    b"te",
    b"trailer",
    b"upgrade",
    b"expect",
}


class Refused(Exception):
    """A request the proxy will not forward: the answer an explicit client gets."""

    def __init__(self, status: int, message: str, headers: Sequence[tuple[str, str]] = ()):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = tuple(headers)


class Route(Protocol):
    """What the HTTP loop asks the proxy (egress.server): who is asking, and a checked
    connection to where they want to go. Both raise Refused (already counted)."""

    async def authorize(self, request: h11.Request) -> SandboxPolicy: ...

    async def connect(self, policy: SandboxPolicy, host: str, port: int) -> Channel: ...


@dataclass(frozen=True)
class Destination:
    host: str
    port: int  # 0: the connection's own (intercepted TLS)
    target: bytes  # origin-form: what the upstream server is asked for

    @property
    def host_header(self) -> str:
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port in (0, 80) else f"{name}:{self.port}"


def explicit_destination(request: h11.Request) -> Destination:
    """Where an absolute-form request (`GET http://host:port/path`) goes."""
    url = request.target.decode("ascii", "replace")
    try:
        parts = urlsplit(url)
        port = parts.port or 80
    except ValueError as error:
        raise Refused(400, "sandhub egress: the request's URL is not valid") from error
    host = normalize_host(parts.hostname or "")
    if parts.scheme != "http" or not host:
        raise Refused(400, "sandhub egress: a proxied request needs an http:// URL")
    header = host_header(request)
    if header is not None and split_host(header, port)[0] != host:
        raise Refused(400, "sandhub egress: the Host header does not match the URL")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Destination(host, port, path.encode("ascii", "replace"))


def transparent_destination(request: h11.Request, default_port: int) -> Destination:
    """Where an origin-form request goes: the Host header names it."""
    header = host_header(request)
    if not header:
        raise Refused(400, "sandhub egress: the request has no Host header")
    host, port = split_host(header, default_port)
    return Destination(host, port, request.target)


def host_header(request: h11.Request) -> str | None:
    for name, value in request.headers:
        if name == b"host":
            return value.decode("ascii", "replace")
    return None


def split_host(value: str, default_port: int) -> tuple[str, int]:
    """("example.com", 8080) from "example.com:8080"; IPv6 in brackets."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, _, port_text = value.partition(":")
    else:
        host, port_text = value, ""
    if not port_text:
        return normalize_host(host), default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise Refused(400, "sandhub egress: the Host header's port is not valid")
    return normalize_host(host), int(port_text)


def upstream_headers(
    headers: Sequence[tuple[bytes, bytes]], host: str, secrets: Sequence[BoundSecret]
) -> list[tuple[bytes, bytes]]:
    # `host`: the Host value to add when the client sent none (an HTTP/1.0 client).
    """The request's headers (raw_items: as the client spelled them) as the upstream gets
    them: hop-by-hop ones dropped, Host made present, each bound secret's header set to its
    value (replacing the client's), and the placeholders of the secrets bound to this host
    replaced inside every value. Placeholders of other secrets stay as they are: a value never
    goes anywhere it is not bound to."""
    replaced = {secret.header.lower().encode() for secret in secrets}
    result: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if name.lower() in HOP_BY_HOP or name.lower() in replaced:
            continue
        for secret in secrets:
            value = value.replace(secret.placeholder.encode(), secret.value.encode())
        result.append((name, value))
    if not any(name.lower() == b"host" for name, _ in result):
        result.insert(0, (b"host", host.encode("ascii", "replace")))
    for secret in secrets:
        result.append((secret.header.encode(), secret.value.encode()))
    return result


def response_headers(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's answer as the client gets it (framing kept: h11 frames by it)."""
    return [(name, value) for name, value in headers if name.lower() not in HOP_BY_HOP]


def fixed_length(response: h11.Response, method: bytes) -> int | None:
    """The body length a response declares by Content-Length alone (None: no body, or
    framed otherwise: h11 reads those)."""
    if method == b"HEAD" or response.status_code in (204, 304):
        return None
    lengths = []
    for name, value in response.headers:
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            lengths.append(value)
    if len(lengths) != 1 or not lengths[0].isdigit():
        return None
    return int(lengths[0])


def keeps_alive(message: h11.Request | h11.Response) -> bool:
    """Whether the sender keeps its connection open after this message (HTTP/1.1 without
    `Connection: close`, as h11 decides)."""
    if message.http_version != b"1.1":
        return False
    tokens = b",".join(value for name, value in message.headers if name == b"connection")
    return b"close" not in [token.strip().lower() for token in tokens.split(b",")]


def refusal_bytes(connection: h11.Connection, refusal: Refused) -> bytes:
    """A short text/plain answer that ends the connection (no request header echoed)."""
    body = (refusal.message.replace("\r", " ").replace("\n", " ") + "\n").encode("utf-8", "replace")
    headers = [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
        *refusal.headers,
    ]
    reason = REASONS.get(refusal.status, "Error")
    response = h11.Response(status_code=refusal.status, headers=headers, reason=reason)
    data = connection.send(response) or b""
    data += connection.send(h11.Data(data=body)) or b""
    data += connection.send(h11.EndOfMessage()) or b""
    return data


REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
}


def plain_answer(refusal: Refused) -> bytes:
    """The same answer as refusal_bytes, for a connection h11 does not drive (CONNECT)."""
    body = (refusal.message.replace("\r", " ").replace("\n", " ") + "\n").encode("utf-8", "replace")
    lines = [
        f"HTTP/1.1 {refusal.status} {REASONS.get(refusal.status, 'Error')}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in refusal.headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


async def next_event(connection: h11.Connection, channel: Channel) -> object:
    """The next h11 event, reading from `channel` as needed (b"" at its end)."""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await channel.recv())
            continue
        return event


async def send(connection: h11.Connection, channel: Channel, event: h11.Event) -> None:
    data = connection.send(event)
    if data:
        await channel.send(data)
