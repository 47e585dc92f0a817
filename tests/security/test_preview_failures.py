"""An app that breaks the exchange is the app's failure, not the platform's (issue 24): 502
with one log line and no traceback, whether it sends more than h11's 16 KB of headers or
closes without answering. In-process through the ASGI application, on the in-memory backend
whose port is a raw loopback server playing the broken app."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from django.core.cache import cache

from sandboxes import services
from sandboxes.proxy import fairshare
from tests.fakes import FakeBackend
from tests.security.preview_asgi import request, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)  # the proxy's threads must see the rows


def _serve(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback server that reads one request per connection and answers with `answer`."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                answer(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.shutdown(socket.SHUT_RDWR)  # what wakes accept() (close alone does not)
    listener.close()
    thread.join(5)


def _huge_headers(conn: socket.socket) -> None:
    """20 KB of a header block that never ends: past h11's 16 KB however the reads fall (a
    whole block in one read would be parsed), then wait for the proxy to give up on it."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 20_000)
    conn.recv(1)


def _nothing(conn: socket.socket) -> None:
    conn.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def broken(fake_backend, monkeypatch) -> Iterator[None]:
    """Port 8000 sends 20 KB of headers; port 8001 closes without a word."""
    servers = [_serve(_huge_headers), _serve(_nothing)]
    ports = {8000: next(servers[0]), 8001: next(servers[1])}
    monkeypatch.setattr(FakeBackend, "ports", ports)
    cache.clear()
    yield
    for server in servers:
        next(server, None)


@pytest.mark.parametrize(
    ("port", "said"),
    [(8000, b"gave no valid HTTP answer"), (8001, b"closed the connection without answering")],
    ids=["over-16k-of-headers", "closed-without-answering"],
)
def test_a_broken_app_is_a_502_with_one_log_line(broken, as_alice, alice, caplog, port, said):
    sandbox = services.create_sandbox(as_alice).id
    services.get_preview_url(as_alice, sandbox, port)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        answer = request(f"/preview/{sandbox}/{port}/", headers={"cookie": session_cookie(alice)})
    assert answer.status == 502, answer
    assert said in answer.body
    assert [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()] == []
    proxy_lines = [r for r in caplog.records if r.name == "sandhub.previews"]
    assert len(proxy_lines) == 1 and proxy_lines[0].levelno == logging.WARNING
    assert sandbox in proxy_lines[0].getMessage() and "\n" not in proxy_lines[0].getMessage()
    assert fairshare.in_use() == {"sandboxes": {}, "teams": {}}  # given back on this path too
