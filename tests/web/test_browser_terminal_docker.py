"""The browser terminal on the real Docker engine, in a real headless Chromium against the
live server: "Open terminal" on the sandbox page gives a shell whose state carries over
between lines and across a reload (the holder in the sandbox replays the scrollback), a
resized window reaches `stty size`; a viewer has no button and his websocket is refused; a
websocket from another origin is refused even with the member's cookie; another team's
member is refused a terminal exactly as a made-up one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from websockets.exceptions import ConnectionClosed, InvalidStatus

from hosts.backends import reset_backends
from sandboxes import services
from sandboxes.models import Sandbox, Terminal
from tenants.models import Membership, Role, Team
from tenants.principal import Principal
from tests.web.browser_terminal import (
    make_world,
    open_terminal_from_sandbox_page,
    screen_text,
    set_passwords,
    sign_in,
    type_line,
    wait_connected,
    wait_for_screen,
)
from tests.web.helpers import off_loop
from tests.web.terminals import open_terminal_socket, read_until, session_cookie

pytestmark = [pytest.mark.docker, pytest.mark.browser]
GHOST = "tm-00000000000000000000000000000"


@pytest.fixture(scope="module")
def world(live_db) -> Iterator[dict[str, Any]]:
    before = settings.SANDHUB_BACKENDS
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    made = off_loop(make_world)
    yield made
    off_loop(_delete_sandboxes)
    settings.SANDHUB_BACKENDS = before
    reset_backends()


def _delete_sandboxes() -> None:
    for sandbox in Sandbox.objects.live():
        services.delete_sandbox(Principal.system(sandbox.team), sandbox.public_id)


@pytest.fixture(autouse=True)
def passwords(world) -> None:
    off_loop(set_passwords, world)


def test_a_shell_that_keeps_its_state_across_lines_and_a_reload(
    asgi_server, world, chromium, screenshots
):
    page = sign_in(chromium, asgi_server, "alice")
    open_terminal_from_sandbox_page(page, asgi_server, world["sandbox"])
    type_line(page, "cd /tmp; export A=1")
    type_line(page, "echo $A $PWD")
    wait_for_screen(page, r"/^1 \/tmp$/m.test(text)")
    screenshots(page, "typed")

    page.reload()
    wait_connected(page)
    wait_for_screen(page, r"/^1 \/tmp$/m.test(text)")  # the earlier output, replayed
    assert len(re.findall(r"(?m)^1 /tmp$", screen_text(page))) == 1, "replayed twice"
    type_line(page, "echo A=$A")
    wait_for_screen(page, r"/^A=1$/m.test(text)")

    type_line(page, "stty size")
    wait_for_screen(page, r"/^\d+ \d+$/m.test(text)")
    before = re.findall(r"(?m)^(\d+) (\d+)$", screen_text(page))[-1]
    page.set_viewport_size({"width": 800, "height": 560})
    type_line(page, "clear; stty size")
    wait_for_screen(page, rf"/^\d+ \d+$/m.test(text) && !/^{before[0]} {before[1]}$/m.test(text)")
    after = re.findall(r"(?m)^(\d+) (\d+)$", screen_text(page))[-1]
    assert int(after[0]) < int(before[0]) and int(after[1]) < int(before[1]), (before, after)
    screenshots(page, "resized")
    page.context.close()


def test_a_viewer_has_no_button_and_his_websocket_is_refused(asgi_server, world, chromium):
    page = sign_in(chromium, asgi_server, "victor")
    page.goto(f"{asgi_server}/sandboxes/{world['sandbox']}/")
    page.wait_for_selector("#terminals:not([hx-get])")
    assert page.query_selector("#terminal-new") is None
    page.context.close()
    terminal = off_loop(services.open_terminal, world["principal"], world["sandbox"]).id
    cookie = off_loop(session_cookie, world["victor"])
    with (
        open_terminal_socket(asgi_server, world["sandbox"], terminal, cookie) as socket,
        pytest.raises(ConnectionClosed) as closed,
    ):
        socket.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403


@pytest.mark.parametrize("origin", ["http://evil.test", "http://sb-x-8000.preview.test"])
def test_a_websocket_from_another_origin_is_refused_with_the_members_cookie(
    asgi_server, world, origin, monkeypatch
):
    monkeypatch.setattr(settings, "SANDHUB_PREVIEW_DOMAIN", "preview.test")
    terminal = off_loop(services.open_terminal, world["principal"], world["sandbox"]).id
    cookie = off_loop(session_cookie, world["alice"])
    with pytest.raises(InvalidStatus) as refused:
        open_terminal_socket(asgi_server, world["sandbox"], terminal, cookie, origin=origin)
    assert refused.value.response.status_code == 403
    with open_terminal_socket(asgi_server, world["sandbox"], terminal, cookie) as socket:
        socket.send(b"echo own-origin-$((6*7))\r")
        read_until(socket, b"own-origin-42", timeout=30)


def test_another_teams_terminal_is_refused_as_a_missing_one(asgi_server, world):
    terminal = off_loop(services.open_terminal, world["principal"], world["sandbox"]).id
    cookie = off_loop(_stranger_cookie)
    answers = []
    for terminal_id in (terminal, GHOST):
        with (
            open_terminal_socket(asgi_server, world["sandbox"], terminal_id, cookie) as socket,
            pytest.raises(ConnectionClosed) as closed,
        ):
            socket.recv(timeout=30)
        assert closed.value.rcvd is not None
        answers.append((closed.value.rcvd.code, closed.value.rcvd.reason))
    assert answers[0] == answers[1] == (4404, f"sandbox {world['sandbox']} not found")


def _stranger_cookie() -> str:
    team = Team.objects.get_or_create(slug="beta", defaults={"name": "Team Beta"})[0]
    user = get_user_model().objects.get_or_create(username="bob")[0]
    Membership.objects.get_or_create(user=user, team=team, defaults={"role": Role.MEMBER})
    return session_cookie(user)


def test_deleting_the_sandbox_ends_its_terminals_websocket(asgi_server, world):
    principal = world["principal"]
    doomed = off_loop(services.create_sandbox, principal, name="doomed", memory_mb=256).id
    terminal = off_loop(services.open_terminal, principal, doomed).id
    cookie = off_loop(session_cookie, world["alice"])
    with open_terminal_socket(asgi_server, doomed, terminal, cookie) as socket:
        socket.send(b"echo alive-$((40+2))\r")
        read_until(socket, b"alive-42", timeout=30)
        off_loop(services.delete_sandbox, principal, doomed)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                socket.recv(timeout=60)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4410
    off_loop(services.sweep_expired_and_idle, Principal.system())
    rows = off_loop(lambda: list(Terminal.objects.filter(terminal_id=terminal)))
    assert rows[0].closed_at is not None, "the sweep closes the rows of a deleted sandbox"
