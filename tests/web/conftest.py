"""Fixtures for the web pages' tests.

Test-client tests use the two-team fixtures of tests/conftest.py, `login` and the sandbox
page's `sandbox` below (helpers: tests/web/helpers.py). Browser tests drive Debian's chromium
(/usr/bin/chromium; `.ci/run` and `make install` install it) through playwright against
platform_site.asgi served by uvicorn in a thread (tests/conftest.py's `asgi_server`, on the
committed module database `live_db`); they use `chromium`, so they are marked `browser`.
Playwright's own browser download does not work here, hence executable_path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from sandboxes import services

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


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    """Alice's sandbox on the in-memory backend, with /workspace/a.txt (the sandbox page's
    tests: test_sandbox_page*.py)."""
    info = services.create_sandbox(as_alice)
    services.write_file(as_alice, info.id, "a.txt", "hello\n")
    return info.id
