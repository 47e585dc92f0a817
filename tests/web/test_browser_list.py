"""The sandbox list's search, sort and pages in a real headless Chromium against the live
server: typing searches (htmx swaps the list alone and puts the search in the address), a
column header sorts and says so (aria-sort), pages keep both; the same without JavaScript as
plain links and a plain form; the warning of a sandbox about to expire. The sandboxes are on
the in-memory backend: the list reads only the database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.utils import timezone

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from sandboxes.models import Sandbox
from sandboxes.services import sandbox_search
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.web.helpers import off_loop

PASSWORD = "correct-horse-battery"
MD5 = "django.contrib.auth.hashers.MD5PasswordHasher"
# Ids never hold a "-" (nor do the image and the host): "web-" finds names alone.
NAMES = ["web-cedar", "db-ash", "web-elm", "db-birch", "web-oak"]


def make_world() -> dict[str, Any]:
    reset_backends()
    FakeBackend.sandboxes = {}
    team = Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=10)
    user = get_user_model().objects.create_user("alice", password=PASSWORD)
    Membership.objects.create(user=user, team=team, role=Role.OWNER)
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    principal = Principal(user=user, team=team, channel=Channel.WEB)
    made = [services.create_sandbox(principal, name=name).id for name in NAMES]
    soon = timezone.now() + timedelta(minutes=9, seconds=30)
    Sandbox.objects.filter(public_id=made[2]).update(expires_at=soon)  # web-elm
    return {"principal": principal, "ids": made}


@pytest.fixture(scope="module")
def world(live_db) -> Any:
    # The password hashed as the tests' hasher checks it (tests/conftest.py's
    # fast_password_hashing starts after a module's fixtures).
    with override_settings(SANDHUB_BACKENDS={"docker": "tests.fakes.FakeBackend"}):
        with override_settings(PASSWORD_HASHERS=[MD5]):
            made = off_loop(make_world)
        yield made
    reset_backends()


@pytest.fixture
def small_pages(monkeypatch) -> None:
    monkeypatch.setattr(sandbox_search, "PER_PAGE", 2)  # the live server runs in-process


def open_list(asgi_server: str, chromium: Any, javascript: bool = True) -> Any:
    context = chromium.new_context(
        viewport={"width": 1280, "height": 900}, java_script_enabled=javascript
    )
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{asgi_server}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{asgi_server}/")
    return page


def shown(page: Any) -> list[str]:
    return page.locator("#sandbox-table a.sandbox-link").all_inner_texts()


def wait_for_rows(page: Any, names: list[str]) -> None:
    page.wait_for_function(
        """(names) => JSON.stringify([...document.querySelectorAll(
             '#sandbox-table a.sandbox-link')].map(a => a.textContent))
             === JSON.stringify(names)""",
        arg=names,
    )


def test_search_sort_and_pages_with_htmx(asgi_server, world, chromium, small_pages, screenshots):
    print(f"\nscreenshots: {screenshots.directory}")
    page = open_list(asgi_server, chromium)
    assert shown(page) == ["web-oak", "db-birch"]  # newest first, two a page
    page.fill("#sandbox-q", "web-")  # typing searches
    wait_for_rows(page, ["web-oak", "web-elm"])
    assert "q=web-" in page.url
    assert "3 sandboxes matching “web-”" in page.inner_text("#list-count")

    name = page.locator("th.sortable", has_text="Name")
    name.locator("a").click()
    wait_for_rows(page, ["web-cedar", "web-elm"])
    assert page.locator("th.sortable", has_text="Name").get_attribute("aria-sort") == "ascending"
    page.locator("th.sortable", has_text="Name").locator("a").click()
    wait_for_rows(page, ["web-oak", "web-elm"])
    header = page.locator("th.sortable", has_text="Name")
    assert header.get_attribute("aria-sort") == "descending"
    screenshots(page, "searched-and-sorted")

    page.click("nav.pagination a[rel=next]")
    wait_for_rows(page, ["web-cedar"])
    assert "q=web-" in page.url and "sort=-name" in page.url and "page=2" in page.url
    assert page.input_value("#sandbox-q") == "web-"
    page.reload()  # the address holds it all
    wait_for_rows(page, ["web-cedar"])
    page.fill("#sandbox-q", "web-e")  # a new search keeps the sort, from its first page
    wait_for_rows(page, ["web-elm"])
    assert "sort=-name" in page.url and "page=" not in page.url
    page.go_back()
    wait_for_rows(page, ["web-cedar"])
    assert page.input_value("#sandbox-q") == "web-"  # back shows the search it had
    page.context.close()


def test_the_same_without_javascript(asgi_server, world, chromium, small_pages):
    page = open_list(asgi_server, chromium, javascript=False)
    page.fill("#sandbox-q", "web-")
    page.click("#sandbox-search-submit")
    page.wait_for_url("**q=web-**")
    assert shown(page) == ["web-oak", "web-elm"]
    page.locator("th.sortable", has_text="Age").locator("a").click()  # oldest first now
    page.wait_for_url("**sort=created**")
    assert shown(page) == ["web-cedar", "web-elm"]
    page.click("nav.pagination a[rel=next]")
    page.wait_for_url("**page=2**")
    assert shown(page) == ["web-oak"]
    page.goto(f"{asgi_server}/?sort=size&page=x")
    assert "cannot sort by 'size'" in page.inner_text("#list-error")
    page.context.close()


def test_the_list_warns_before_a_sandbox_expires(asgi_server, world, chromium):
    page = open_list(asgi_server, chromium)
    row = page.locator(f"tr[data-sandbox-id='{world['ids'][2]}']")
    assert row.locator(".expiry-soon").inner_text() == "expires in 10 min"
    assert page.locator(".expiry-soon").count() == 1
    row.locator("button.extend-soon").click()
    page.wait_for_url(f"**/sandboxes/{world['ids'][2]}/")
    assert "lives 60 minutes longer" in page.inner_text(".messages")
    page.context.close()
