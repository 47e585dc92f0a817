"""Bodies through the proxy, both ways, by every framing and path: spliced between plain
sockets, copied inside intercepted TLS, chunked through h11; keep-alive after each."""

from __future__ import annotations

import socket
import threading

import pytest

from egress.policy import parse_rule
from tests.egress.conftest import SECRET, World
from tests.egress.servers import pattern, read_answer, tunnel

SIZE = 3 * 1024 * 1024 + 17  # several reads of the proxy's 256 KiB, and an odd end


def read_chunked(sock, head_and_rest: bytes) -> bytes:
    """The body of a chunked answer whose head (and maybe some body) was read."""
    data = head_and_rest.partition(b"\r\n\r\n")[2]
    body = b""
    while True:
        while b"\r\n" not in data:
            data += sock.recv(65536)
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        while len(data) < size + 2:
            data += sock.recv(65536)
        body, data = body + data[:size], data[size + 2 :]
        if size == 0:
            return body


def get(sock, target: str, host: str) -> bytes:
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return read_answer(sock)


def test_large_bodies_over_plain_http_keep_the_connection(world: World):
    host = f"allowed.test:{world.plain.port}"
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        answer = get(sock, f"http://{host}/bytes/{SIZE}", host)
        assert answer.partition(b"\r\n\r\n")[2] == pattern(SIZE)
        sock.sendall(f"GET http://{host}/chunked/{SIZE} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(65536)
        assert b"transfer-encoding: chunked" in head.lower()
        assert read_chunked(sock, head) == pattern(SIZE)
        assert get(sock, f"http://{host}/after", host).endswith(b"hello from allowed.test")
    assert [path for path, _, _ in world.plain.requests][-1] == "/after"


def test_pipelined_requests_after_a_spliced_body(world: World):
    host = f"allowed.test:{world.plain.port}"
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        one = f"GET http://{host}/bytes/1000 HTTP/1.1\r\nHost: {host}\r\n\r\n"
        two = f"GET http://{host}/two HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        sock.sendall((one + two).encode())
        answers = b""
        while chunk := sock.recv(65536):  # the proxy closes after the second (close asked)
            answers += chunk
    assert pattern(1000) in answers
    assert answers.endswith(b"hello from allowed.test")


@pytest.mark.parametrize("kind", ["bytes", "chunked"])
def test_large_bodies_inside_intercepted_tls(world: World, kind: str):
    context = world.client_context(world.proxy_ca)
    with tunnel(world.port, "secret.test", world.secret.port, context) as sock:
        sock.sendall(f"GET /{kind}/{SIZE} HTTP/1.1\r\nHost: secret.test\r\n\r\n".encode())
        if kind == "bytes":
            body = read_answer(sock).partition(b"\r\n\r\n")[2]
        else:
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(65536)
            body = read_chunked(sock, head)
        assert body == pattern(SIZE)
        sock.sendall(b"GET /again HTTP/1.1\r\nHost: secret.test\r\n\r\n")
        assert read_answer(sock).endswith(b"hello from secret.test")
    assert world.secret.requests[-1][1]["Authorization"] == SECRET.value


def test_request_bodies_are_streamed_to_the_upstream(world: World):
    host = f"allowed.test:{world.plain.port}"
    body = pattern(SIZE)
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        head = (
            f"POST http://{host}/upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: {SIZE}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        assert read_answer(sock).endswith(b"hello from allowed.test")
    assert world.plain.requests[-1][0] == "/upload"
    assert world.plain.requests[-1][2] == SIZE


def test_expect_100_continue_is_answered_by_the_proxy(world: World):
    host = f"allowed.test:{world.plain.port}"
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        head = (
            f"POST http://{host}/upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n"
            "Expect: 100-continue\r\n\r\n"
        )
        sock.sendall(head.encode())
        assert read_answer(sock).startswith(b"HTTP/1.1 100 ")
        sock.sendall(b"hello")
        assert read_answer(sock).endswith(b"hello from allowed.test")
    assert world.plain.requests[-1][2] == 5


def test_close_delimited_answer_is_reframed_for_a_keep_alive_client(world: World):
    """An HTTP/1.0 upstream that ends its body by closing: the client gets it chunked and
    keeps its connection for the next request."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        world.source.addresses["127.0.0.1"] = world.allowlist(
            rules=(parse_rule(f"allowed.test:{port},{world.plain.port}"),)
        )

        def answer_once() -> None:
            accepted, _ = listener.accept()
            with accepted:
                while b"\r\n\r\n" not in accepted.recv(65536):
                    pass
                accepted.sendall(
                    b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + pattern(5000)
                )

        server = threading.Thread(target=answer_once)
        server.start()
        with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
            host = f"allowed.test:{port}"
            sock.sendall(f"GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(65536)
            assert b"transfer-encoding: chunked" in head.lower()
            assert read_chunked(sock, head) == pattern(5000)
            other = f"allowed.test:{world.plain.port}"
            assert get(sock, f"http://{other}/next", other).endswith(b"hello from allowed.test")
        server.join(10)
