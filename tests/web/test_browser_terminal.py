"""The browser terminal in a real headless Chromium against the live server and the in-memory
backend (tests/fake_terminals.py: it echoes what is typed and answers `stty size`): "Open
terminal" on the sandbox page, typing shows, a reload shows the earlier output once (the
screen is reset before the replay), a resize reaches the terminal, the section lists it, and a
viewer has no button and is refused the page. The real shell on Docker:
test_browser_terminal_docker.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from hosts.backends import reset_backends
from tests.fakes import FakeBackend
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
from tests.web.terminals import CuttableProxy

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def world(live_db) -> Iterator[dict[str, Any]]:
    before = settings.SANDHUB_BACKENDS
    settings.SANDHUB_BACKENDS = {"docker": "tests.fakes.FakeBackend"}
    FakeBackend.sandboxes = {}
    yield off_loop(make_world)
    settings.SANDHUB_BACKENDS = before
    reset_backends()


@pytest.fixture(autouse=True)
def passwords(world) -> None:
    off_loop(set_passwords, world)


def test_open_type_reload_and_resize(asgi_server, world, chromium, screenshots):
    page = sign_in(chromium, asgi_server, "alice")
    violations: list[str] = []
    page.on(
        "console",
        lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None,
    )
    url = open_terminal_from_sandbox_page(page, asgi_server, world["sandbox"])
    type_line(page, "hello-from-chromium")
    wait_for_screen(page, "text.includes('hello-from-chromium')")
    screenshots(page, "typed")

    page.reload()
    wait_connected(page)
    wait_for_screen(page, "text.includes('hello-from-chromium')")
    assert screen_text(page).count("hello-from-chromium") == 1, "replayed on top of the old"

    page.set_viewport_size({"width": 700, "height": 500})
    type_line(page, "stty size")
    wait_for_screen(page, r"/\n\d+ \d+/.test(text)")
    rows, cols = map(int, re.findall(r"\n(\d+) (\d+)", screen_text(page))[-1])
    assert cols < 80 and rows < 24, (rows, cols)

    page.goto(f"{asgi_server}/sandboxes/{world['sandbox']}/")
    page.wait_for_selector(".terminal-row")
    assert page.get_attribute(".terminal-attach", "href") in url
    assert violations == [], "xterm.js's styles were refused by the page's policy"
    page.context.close()


def test_a_viewer_has_no_button_and_no_terminal_page(asgi_server, world, chromium):
    page = sign_in(chromium, asgi_server, "victor")
    page.goto(f"{asgi_server}/sandboxes/{world['sandbox']}/")
    page.wait_for_selector("#terminals-title")
    page.wait_for_selector("#terminals:not([hx-get])")  # the list came
    assert page.query_selector("#terminal-new") is None
    answer = page.request.post(
        f"{asgi_server}/sandboxes/{world['sandbox']}/terminals/new/",
        headers={"X-CSRFToken": page.context.cookies()[0]["value"]},
    )
    assert answer.status in (403, 400)
    page.context.close()


def test_a_dropped_network_reconnects_to_the_same_terminal(asgi_server, world, chromium):
    page = sign_in(chromium, asgi_server, "alice")
    url = open_terminal_from_sandbox_page(page, asgi_server, world["sandbox"])
    proxy = CuttableProxy(asgi_server)
    try:
        page.goto(url.replace(asgi_server, proxy.url))  # the same terminal, through the proxy
        wait_connected(page)
        type_line(page, "before-the-drop")
        wait_for_screen(page, "text.includes('before-the-drop')")
        proxy.cut()
        page.wait_for_selector("#terminal-status[data-state=reconnecting]")
        wait_connected(page)
        wait_for_screen(page, "text.includes('before-the-drop')")  # replayed
        type_line(page, "after-the-drop")
        wait_for_screen(page, "text.includes('after-the-drop')")
        assert screen_text(page).count("before-the-drop") == 1
    finally:
        page.context.close()
        proxy.close()
