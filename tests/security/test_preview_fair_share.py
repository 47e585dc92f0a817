"""One tenant cannot starve everyone's previews (issue 24): per sandbox and per team, a web
process carries only so many preview connections at once (503 past that), an app that stops
answering is given up on (504), an idle websocket is closed, and every connection's share is
given back however it ended.

Through the live web process (uvicorn serving platform_site.asgi on loopback) with raw
sockets, as a hostile client sends them; sandboxes on the in-memory backend, whose ports are
loopback servers: team A's app answers, team B's accepts and never says a word.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from hosts.backends import reset_backends
from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import Channel
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.previews.recorder import RecordingApp, running

STALLED_CONNECTIONS = 500


class SilentApp:
    """Accepts every connection and never answers; counts them."""

    def __init__(self, greeting: bytes = b"") -> None:
        self.greeting = greeting  # sent first, then silence (a response cut short)
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.greeting:
                conn.sendall(self.greeting)
            self.held.append(conn)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(5)
        for conn in self.held:
            conn.close()


@dataclass
class Stage:
    server: str
    a: str  # team A's sandbox: 8000 answers
    b: str  # team B's: 8001 is silent, 8002 answers its headers then stops
    b2: str  # team B's second sandbox
    cookies: dict[str, str]  # sandbox -> its preview cookie (all ports)
    silent: SilentApp

    def url(self, sandbox: str, port: int, path: str = "") -> str:
        return f"{self.server}/preview/{sandbox}/{port}/{path}"

    def raw_get(self, sandbox: str, port: int) -> bytes:
        host = urlsplit(self.server).netloc
        return (
            f"GET /preview/{sandbox}/{port}/ HTTP/1.1\r\nHost: {host}\r\n"
            f"Cookie: {self.cookies[sandbox, port]}\r\n\r\n"
        ).encode()


@pytest.fixture
def stage(asgi_server, world, settings, monkeypatch) -> Iterator[Stage]:
    settings.SANDHUB_BACKENDS = {"docker": "tests.fakes.FakeBackend"}
    reset_backends()
    monkeypatch.setattr(FakeBackend, "sandboxes", {})  # put back after, as the ports
    silent, cut_short = (
        SilentApp(),
        SilentApp(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf"),
    )
    with running(RecordingApp("A")) as answering:
        ports = {8000: answering.port, 8001: silent.port, 8002: cut_short.port}
        monkeypatch.setattr(FakeBackend, "ports", ports)
        alice = world.principal()
        bob = Principal(user=world.bob, team=world.team_b, channel=Channel.WEB)
        a = services.create_sandbox(alice).id
        b, b2 = services.create_sandbox(bob).id, services.create_sandbox(bob).id
        cookies = {}
        for principal, sandbox, port in [
            (alice, a, 8000),
            (bob, b, 8001),
            (bob, b, 8002),
            (bob, b2, 8001),
        ]:
            token = services.get_preview_url(principal, sandbox, port).token
            cookies[sandbox, port] = f"{services.PREVIEW_COOKIE}={token}"
        try:
            yield Stage(asgi_server, a, b, b2, cookies, silent)
        finally:
            silent.close()
            cut_short.close()
            for row in Sandbox.objects.exclude(status="deleted"):
                services.delete_sandbox(Principal.system(), row.public_id)
            reset_backends()


def _in_use() -> dict:
    from sandboxes.proxy import fairshare  # imported here: the module is new with issue 24

    return fairshare.in_use()


@pytest.fixture(autouse=True)
def nothing_leaks() -> Iterator[None]:
    """Whatever a test did, every connection's share is given back once its sockets close."""
    yield
    deadline = time.monotonic() + 10
    while _in_use() != {"sandboxes": {}, "teams": {}} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_use() == {"sandboxes": {}, "teams": {}}


async def _until(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def _status(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head


def test_500_stalled_connections_of_one_tenant_leave_another_tenants_preview_fast(stage, settings):
    cap = getattr(settings, "SANDHUB_PREVIEW_SANDBOX_CONNECTIONS", 0)  # new with issue 24
    host, port = urlsplit(stage.server).hostname, urlsplit(stage.server).port
    answers: list[tuple[int, bytes]] = []

    async def scene() -> tuple[int | None, float]:
        streams = [await asyncio.open_connection(host, port) for _ in range(STALLED_CONNECTIONS)]
        for _, writer in streams:
            writer.write(stage.raw_get(stage.b, 8001))

        async def answer(reader: asyncio.StreamReader) -> None:
            answers.append(await _status(reader))

        readers = [asyncio.create_task(answer(reader)) for reader, _ in streams]
        # The proxy has taken them all in: B's app holds what it let through (all of them on
        # a proxy without shares, until its threads ran out), the rest are answered.
        held = lambda: len(stage.silent.held)  # noqa: E731
        await _until(lambda: held() + len(answers) >= STALLED_CONNECTIONS or held() >= 150, 60)
        began = time.monotonic()
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                reply = await client.get(
                    stage.url(stage.a, 8000), headers={"Cookie": stage.cookies[stage.a, 8000]}
                )
            status: int | None = reply.status_code
        except httpx.TimeoutException:
            status = None
        took = time.monotonic() - began
        for task in readers:
            task.cancel()
        for _, writer in streams:
            writer.close()
        return status, took

    status, took = asyncio.run(scene())
    assert status == 200 and took < 1.0, f"team A's preview: {status} after {took:.1f} s"
    assert 0 < len(stage.silent.held) <= cap
    assert len(answers) == STALLED_CONNECTIONS - len(stage.silent.held)
    assert all(code == 503 for code, _ in answers)
    assert all(b"\r\nretry-after: " in head.lower() for _, head in answers)


def test_past_the_sandbox_and_the_team_cap_a_connection_is_503(stage, settings):
    settings.SANDHUB_PREVIEW_SANDBOX_CONNECTIONS = 2
    settings.SANDHUB_PREVIEW_TEAM_CONNECTIONS = 3
    server = urlsplit(stage.server)
    held = []

    def stalled(sandbox: str) -> None:
        conn = socket.create_connection((server.hostname, server.port))
        conn.sendall(stage.raw_get(sandbox, 8001))
        held.append(conn)

    try:
        for _ in range(2):
            stalled(stage.b)
        _wait_for(lambda: len(stage.silent.held) == 2)
        over = httpx.get(stage.url(stage.b, 8001), headers={"Cookie": stage.cookies[stage.b, 8001]})
        assert over.status_code == 503 and "this sandbox" in over.text
        assert int(over.headers["retry-after"]) > 0
        stalled(stage.b2)
        _wait_for(lambda: len(stage.silent.held) == 3)
        cookie = stage.cookies[stage.b2, 8001]
        over = httpx.get(stage.url(stage.b2, 8001), headers={"Cookie": cookie})
        assert over.status_code == 503 and "this team" in over.text
        with pytest.raises(InvalidStatus) as refused:
            connect(
                stage.url(stage.b2, 8001).replace("http", "ws", 1),
                additional_headers={"Cookie": cookie},
            )
        assert refused.value.response.status_code == 403  # uvicorn's answer to a close
        # The refused requests give their sandbox slot back in a finally that may run just
        # after the client has read the refusal: wait for it rather than race it.
        _wait_for(lambda: _in_use()["sandboxes"] == {stage.b: 2, stage.b2: 1})
        # Another team notices nothing.
        mine = httpx.get(stage.url(stage.a, 8000), headers={"Cookie": stage.cookies[stage.a, 8000]})
        assert mine.status_code == 200
    finally:
        for conn in held:
            conn.close()


def _wait_for(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not so after {seconds} s: {_in_use()}"
        time.sleep(0.02)


def test_an_app_that_stops_answering_is_given_up_on(stage, settings):
    settings.SANDHUB_PREVIEW_READ_TIMEOUT_SECONDS = 1
    began = time.monotonic()
    silent = httpx.get(
        stage.url(stage.b, 8001), headers={"Cookie": stage.cookies[stage.b, 8001]}, timeout=10
    )
    assert silent.status_code == 504 and "answered nothing" in silent.text
    assert time.monotonic() - began < 5
    # Its headers came, then nothing: the response ends short (the client sees it cut).
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(
            stage.url(stage.b, 8002), headers={"Cookie": stage.cookies[stage.b, 8002]}, timeout=10
        )


def test_an_idle_websocket_is_closed(stage, settings):
    settings.SANDHUB_PREVIEW_WEBSOCKET_IDLE_SECONDS = 1
    url = stage.url(stage.a, 8000).replace("http", "ws", 1)
    with connect(url, additional_headers={"Cookie": stage.cookies[stage.a, 8000]}) as ws:
        assert ws.recv(timeout=5) == "hello from A"
        ws.send("still here")
        assert ws.recv(timeout=5) == "A echoes still here"
        began = time.monotonic()
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)  # no message either way for a second: closed
        assert time.monotonic() - began < 4
