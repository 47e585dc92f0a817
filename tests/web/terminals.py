"""Helpers of the terminal tests (websocket, browser, bench): a signed-in session's cookie,
a websocket to a terminal as a browser of some origin opens it, and reading it until some
text came. Not a test module."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.test import Client
from websockets.sync.client import ClientConnection, connect


def session_cookie(user: Any, team_slug: str | None = None) -> str:
    """`name=value` of a session signed in as `user` (in `team_slug`, if given)."""
    client = Client()
    client.force_login(user)
    if team_slug:
        session = client.session
        session["sandhub_team"] = team_slug
        session.save()
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def terminal_url(server: str, sandbox_id: str, terminal_id: str) -> str:
    base = server.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    return f"{base}/ws/sandboxes/{sandbox_id}/terminals/{terminal_id}/"


def open_terminal_socket(
    server: str,
    sandbox_id: str,
    terminal_id: str,
    cookie: str | None,
    origin: str | None = "own",
    headers: dict[str, str] | None = None,
    receive_buffer: int | None = None,
) -> ClientConnection:
    """A websocket as a page of `origin` opens it ("own": the platform's; None: no Origin).
    `receive_buffer`: the client socket's SO_RCVBUF (a slow reader's small window)."""
    parts = urlsplit(server)
    extra = dict(headers or {})
    if cookie:
        extra["Cookie"] = cookie
    if origin == "own":
        origin = f"{parts.scheme}://{parts.netloc}"
    sock = None
    if receive_buffer is not None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    return connect(
        terminal_url(server, sandbox_id, terminal_id),
        sock=sock,
        origin=origin,  # type: ignore[arg-type]
        additional_headers=extra,
        open_timeout=30,
        max_size=None,
    )


def read_until(socket: ClientConnection, wanted: bytes, timeout: float = 20) -> bytes:
    """What the terminal printed until `wanted` (AssertionError naming what came instead)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {wanted!r} within {timeout} s; got {seen[-500:]!r}")
        try:
            frame = socket.recv(timeout=left)
        except TimeoutError:
            continue
        seen += frame if isinstance(frame, bytes) else frame.encode()
    return seen


class CuttableProxy:
    """A TCP forwarder on a loopback port to the live server, whose connections the test can
    cut at once (as a dropped network does: the browser sees its websocket die, 1006), while
    new ones still go through. Cookies ignore ports, so a session of the server's is sent."""

    def __init__(self, server: str) -> None:
        parts = urlsplit(server)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.live: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.live += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """End every connection open now, with no websocket close frame."""
        with self.lock:
            live, self.live = self.live, []
        for sock in live:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked in recv on it
            sock.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()
