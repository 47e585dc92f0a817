"""Fixtures for the web pages' tests.

Test-client tests use the two-team fixtures of tests/conftest.py and `login` below. Browser
tests drive Debian's chromium (/usr/bin/chromium; `.ci/run` and `make install` install it)
through playwright against platform_site.asgi served by uvicorn in a thread
(tests/conftest.py's `asgi_server`, on the committed module database `live_db`).
Playwright's own browser download does not work here, hence executable_path.
"""

from __future__ import annotations

import concurrent.futures
import html as html_module
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import Client

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def login() -> Callable[..., Client]:
    """login(user, team_slug=None, csrf=False): a test client signed in as `user` (acting in
    `team_slug` when given); csrf=True makes it check CSRF tokens like a browser would."""

    def make(user: Any, team_slug: str | None = None, csrf: bool = False) -> Client:
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(user)
        if team_slug:
            session = client.session
            session["sandhub_team"] = team_slug
            session.save()
        return client

    return make


def field_errors(html: str, field: str) -> list[str]:
    """The error messages shown beside `field` (templates/web/_field.html)."""
    # From the field's wrapper to the next field or the form's end (widgets nest divs).
    block = re.search(
        rf'<div class="field[^"]*" id="field-{re.escape(field)}">(.*?)(?:id="field-|</form>)',
        html,
        re.S,
    )
    assert block, f"no field {field} on the page"
    found = re.findall(r'<small class="error"[^>]*>(.*?)</small>', block.group(1), re.S)
    return [html_module.unescape(e) for e in found]


# --- browser ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """A headless Chromium (Debian's package), shared by the module's tests."""
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is absent: the browser tests need Debian's chromium package "
            "(apt-get install chromium; CI installs it)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


class Screenshots:
    """Full-page screenshots numbered in the order taken, under the test's tmp_path."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.taken: list[Path] = []

    def __call__(self, page: Any, name: str) -> Path:
        path = self.directory / f"{len(self.taken) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        self.taken.append(path)
        return path


@pytest.fixture
def screenshots(tmp_path: Path) -> Screenshots:
    directory = tmp_path / "screenshots"
    directory.mkdir()
    return Screenshots(directory)


def off_loop(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args) in a thread of its own. Playwright's sync API keeps an event loop running in
    the test's thread, where Django refuses ORM calls and asyncio.run refuses to start; the
    thread's database connection is closed after (PostgreSQL could not drop the database)."""

    def closing() -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(closing).result()
