"""What the egress tests talk to: a dict policy source, upstream HTTP and HTTPS servers on
loopback that record what reached them, and small clients. Not a test module."""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from egress.policy import SandboxPolicy


class DictSource:
    """A PolicySource over dicts; keeps every report and signals each one."""

    def __init__(self) -> None:
        self.addresses: dict[str, SandboxPolicy] = {}
        self.tokens: dict[tuple[str, str], SandboxPolicy] = {}
        self.reports: list[dict[tuple[str, str, str], int]] = []
        self.reported = threading.Event()

    def by_address(self, address: str) -> SandboxPolicy | None:
        return self.addresses.get(address)

    def by_token(self, sandbox_id: str, token: str) -> SandboxPolicy | None:
        return self.tokens.get((sandbox_id, token))

    def report(self, refusals: dict[tuple[str, str, str], int]) -> None:
        self.reports.append(dict(refusals))
        self.reported.set()

    def total(self) -> dict[tuple[str, str, str], int]:
        counts: dict[tuple[str, str, str], int] = {}
        for report in self.reports:
            for key, count in report.items():
                counts[key] = counts.get(key, 0) + count
        return counts


class Recorder(BaseHTTPRequestHandler):
    """Records each request (path, headers, body size) on the server; answers "hello from
    <name>" without echoing anything it received."""

    protocol_version = "HTTP/1.1"
    server: Upstream

    def do_GET(self) -> None:
        self._record(b"")
        kind, _, size = self.path.strip("/").partition("/")
        if kind in ("bytes", "chunked") and size.isdigit():
            self._pattern(int(size), chunked=kind == "chunked")
        else:
            self._answer()

    def _pattern(self, size: int, chunked: bool) -> None:
        """`size` bytes of pattern(size), by Content-Length or chunked in 64 KiB pieces."""
        body = pattern(size)
        self.send_response(200)
        self.send_header(
            "Transfer-Encoding" if chunked else "Content-Length",
            "chunked" if chunked else str(size),
        )
        self.end_headers()
        if not chunked:
            self.wfile.write(body)
            return
        for start in range(0, size, 65536):
            piece = body[start : start + 65536]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def do_POST(self) -> None:
        expected = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(expected)
        self._record(body)
        if len(body) < expected:
            self.server.cut_short.set()  # the client side went away mid-body
            self.close_connection = True
            return
        self._answer()

    def _record(self, body: bytes) -> None:
        self.server.requests.append((self.path, dict(self.headers.items()), len(body)))

    def _answer(self) -> None:
        body = f"hello from {self.server.name}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def pattern(size: int) -> bytes:
    """Bytes whose every position is checked (a shifted or dropped chunk shows)."""
    return (bytes(range(251)) * (size // 251 + 1))[:size]


class Upstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, name: str, context: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Recorder)
        self.name = name
        self.context = context
        self.requests: list[tuple[str, dict[str, str], int]] = []
        self.cut_short = threading.Event()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def get_request(self) -> tuple[socket.socket, object]:
        sock, address = super().get_request()
        if self.context is not None:  # the handshake happens in the handler's thread
            sock = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up (the tests do, on purpose)


@contextmanager
def serving(name: str, context: ssl.SSLContext | None = None) -> Iterator[Upstream]:
    server = Upstream(name, context)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def basic(sandbox_id: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{sandbox_id}:{token}".encode()).decode()


def proxied_get(
    proxy_port: int, url: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """An explicit-proxy GET (absolute-form) on a connection of its own."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
    try:
        connection.request("GET", url, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def tunnel(
    proxy_port: int,
    host: str,
    port: int,
    context: ssl.SSLContext,
    headers: dict[str, str] | None = None,
    server_hostname: str | None = None,
) -> ssl.SSLSocket:
    """A TLS connection to host:port through CONNECT (OSError/ssl.SSLError if refused)."""
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
    try:
        answer = connect(sock, host, port, headers)
        if not answer.startswith(b"HTTP/1.1 200"):
            raise ConnectionRefusedError(answer.decode("latin-1"))
        return context.wrap_socket(sock, server_hostname=server_hostname or host)
    except BaseException:
        sock.close()
        raise


def connect(
    sock: socket.socket, host: str, port: int, headers: dict[str, str] | None = None
) -> bytes:
    """Send CONNECT host:port and return the proxy's answer head (and body, if any)."""
    lines = [f"CONNECT {host}:{port} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return read_answer(sock)


def read_answer(sock: socket.socket) -> bytes:
    """An answer's head, plus its body when it says Content-Length (or until close)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def https_get(sock: ssl.SSLSocket, host: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return read_answer(sock)
