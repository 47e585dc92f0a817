"""The terminal websocket (sandboxes/terminal_ws/) against the live server and the in-memory
backend: a member types and resizes; the scrollback comes again on a new connection; a
websocket from any origin but the platform's is refused before it is accepted, even with the
member's cookie (cross-site websocket hijacking); a viewer, a stranger, another team's
member and a made-up id are refused; an ended terminal and lost access close it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from websockets.exceptions import ConnectionClosed, InvalidStatus

from hosts.backends import reset_backends
from sandboxes import services
from sandboxes.models import Terminal
from sandboxes.terminal_ws import app as terminal_app
from tenants.models import Membership
from tests.fakes import FakeBackend
from tests.live import World, build_world
from tests.web.terminals import open_terminal_socket, read_until, session_cookie

GHOST = "tm-00000000000000000000000000000"


@pytest.fixture(scope="module")
def world(live_db) -> Iterator[World]:
    before = settings.SANDHUB_BACKENDS
    settings.SANDHUB_BACKENDS = {"docker": "tests.fakes.FakeBackend"}
    reset_backends()
    FakeBackend.sandboxes = {}
    yield build_world()
    settings.SANDHUB_BACKENDS = before
    reset_backends()


@pytest.fixture(scope="module")
def sandbox(world) -> str:
    return services.create_sandbox(world.principal()).id


@pytest.fixture
def terminal(world, sandbox) -> Iterator[str]:
    opened = services.open_terminal(world.principal(), sandbox, cols=80, rows=24)
    yield opened.id
    services.close_terminal(world.principal(), sandbox, opened.id)


def typed(sandbox: str, terminal: str) -> bytes:
    box = next(b for b in FakeBackend.sandboxes.values() if terminal in b.get("terminals", {}))
    return bytes(box["terminals"][terminal].output)


def refused_before_accept(server: str, sandbox: str, terminal: str, **how: Any) -> int:
    with pytest.raises(InvalidStatus) as refused:
        open_terminal_socket(server, sandbox, terminal, **how)
    return refused.value.response.status_code


def closed_with(server: str, sandbox: str, terminal: str, cookie: str | None) -> tuple[int, str]:
    with (
        open_terminal_socket(server, sandbox, terminal, cookie) as socket,
        pytest.raises(ConnectionClosed) as closed,
    ):
        socket.recv(timeout=20)
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code, closed.value.rcvd.reason


def test_a_member_types_resizes_and_gets_the_scrollback_again(
    asgi_server, world, sandbox, terminal
):
    cookie = session_cookie(world.alice)
    with open_terminal_socket(asgi_server, sandbox, terminal, cookie) as socket:
        read_until(socket, b"$ ")
        socket.send('{"t": "i", "d": "echo typed-as-text\\r"}')
        read_until(socket, b"typed-as-text")
        socket.send(b"binary-input\r")
        read_until(socket, b"binary-input")
        socket.send('{"t": "r", "cols": 132, "rows": 43}')
        socket.send(b"stty size\r")
        read_until(socket, b"43 132")
    with open_terminal_socket(asgi_server, sandbox, terminal, cookie) as again:
        assert b"typed-as-text" in read_until(again, b"43 132")  # replayed
    assert Terminal.objects.get(terminal_id=terminal).closed_at is None


@pytest.mark.parametrize(
    "origin, headers",
    [
        ("http://evil.test", {}),
        ("http://sb-abc-8000.preview.test", {}),  # a page on the preview domain
        ("null", {}),  # a sandboxed page (a preview in path mode)
        (None, {}),
        ("own", {"Sec-Fetch-Site": "cross-site"}),
        ("own", {"Sec-Fetch-Site": "same-site"}),
    ],
)
def test_a_websocket_from_another_origin_is_refused_even_with_the_members_cookie(
    asgi_server, world, sandbox, terminal, settings, origin, headers
):
    settings.SANDHUB_PREVIEW_DOMAIN = "preview.test"
    cookie = session_cookie(world.alice)
    before = typed(sandbox, terminal)
    status = refused_before_accept(
        asgi_server, sandbox, terminal, cookie=cookie, origin=origin, headers=headers
    )
    assert status == 403
    assert typed(sandbox, terminal) == before
    # The same cookie from the platform's own page is let in: it is the origin that refused.
    with open_terminal_socket(asgi_server, sandbox, terminal, cookie) as socket:
        read_until(socket, b"$ ")


def test_a_viewer_a_stranger_and_another_teams_member_are_refused(
    asgi_server, world, sandbox, terminal
):
    viewer = closed_with(asgi_server, sandbox, terminal, session_cookie(world.victor))
    assert viewer == (4403, "a viewer may not use terminals")
    assert closed_with(asgi_server, sandbox, terminal, None)[0] == 4401
    bob = session_cookie(world.bob)
    foreign = closed_with(asgi_server, sandbox, terminal, bob)
    ghost = closed_with(asgi_server, sandbox, GHOST, bob)
    assert foreign[0] == ghost[0] == 4404
    assert foreign[1] == ghost[1] == f"sandbox {sandbox} not found"
    own_ghost = closed_with(asgi_server, sandbox, GHOST, session_cookie(world.alice))
    assert own_ghost == (4404, f"terminal {GHOST} not found")


def test_closing_the_terminal_ends_its_websocket(asgi_server, world, sandbox):
    opened = services.open_terminal(world.principal(), sandbox)
    cookie = session_cookie(world.alice)
    with open_terminal_socket(asgi_server, sandbox, opened.id, cookie) as socket:
        read_until(socket, b"$ ")
        services.close_terminal(world.principal(), sandbox, opened.id)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                socket.recv(timeout=20)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4410
    code, reason = closed_with(asgi_server, sandbox, opened.id, cookie)
    assert code == 4410 and "has ended" in reason


def test_a_member_removed_from_the_team_is_cut_off(asgi_server, world, sandbox, monkeypatch):
    monkeypatch.setattr(terminal_app, "CHECK_SECONDS", 0.2)
    opened = services.open_terminal(world.principal(), sandbox)
    cookie = session_cookie(world.dave)
    try:
        with open_terminal_socket(asgi_server, sandbox, opened.id, cookie) as socket:
            read_until(socket, b"$ ")
            Membership.objects.filter(user=world.dave).delete()
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    socket.recv(timeout=20)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
    finally:
        Membership.objects.create(user=world.dave, team=world.team_a, role="member")
        services.close_terminal(world.principal(), sandbox, opened.id)


def test_a_browser_that_reads_slowly_holds_the_output_back(asgi_server, world, sandbox, terminal):
    """Nothing between the terminal and a slow browser grows with the output: once the
    socket's buffers are full the platform stops reading from the terminal (the holder in
    the sandbox keeps the rest, bounded, as the backend promises). The client's receive
    window is small, so the kernel's buffers (up to 32 MB on loopback) do not hide it."""
    flood = 32 * 2**20
    box = next(b for b in FakeBackend.sandboxes.values() if terminal in b.get("terminals", {}))
    fake = box["terminals"][terminal]
    fake.print(os.urandom(flood))  # what compresses (permessage-deflate) would fly through
    cookie = session_cookie(world.alice)
    with open_terminal_socket(
        asgi_server, sandbox, terminal, cookie, receive_buffer=65536
    ) as socket:
        socket.recv(timeout=20)  # attached; from now on this client reads nothing
        read = held_back(fake)
        assert read < flood // 4, f"{read} of {flood} bytes taken from the terminal"


def held_back(fake) -> int:
    """How far the platform's reader got once it stopped moving (it must stop)."""
    deadline = time.monotonic() + 30
    last, still_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        # A poll: that the reader stopped is no event; it must stay still for a second.
        time.sleep(0.1)
        offset = fake.streams[-1].offset
        if offset != last:
            last, still_since = offset, time.monotonic()
        elif time.monotonic() - still_since > 1.0:
            return offset
    raise AssertionError(f"the reader never stopped: {last} bytes")
