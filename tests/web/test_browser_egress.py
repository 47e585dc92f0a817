"""The create form's Network select in a real headless Chromium against the live server:
the allow-list box shows only with "Allow-list" (static/web/egress.js), a sandbox made that
way has that mode and list, and its page's Network section says so. On the in-memory
backend: the form and the page read only the database."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes.models import Sandbox
from tenants.models import Membership, Role, Team
from tests.fakes import FakeBackend
from tests.web.helpers import off_loop

PASSWORD = "correct-horse-battery"
MD5 = "django.contrib.auth.hashers.MD5PasswordHasher"


def make_world() -> Team:
    reset_backends()
    FakeBackend.sandboxes = {}
    team = Team.objects.create(
        slug="alpha",
        name="Team Alpha",
        allow_network=True,
        egress_allowlist=["pypi.org", "github.com:22,443"],
    )
    user = get_user_model().objects.create_user("alice", password=PASSWORD)
    Membership.objects.create(user=user, team=team, role=Role.OWNER)
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    return team


@pytest.fixture(scope="module")
def team(live_db) -> Any:
    with override_settings(SANDHUB_BACKENDS={"docker": "tests.fakes.FakeBackend"}):
        with override_settings(PASSWORD_HASHERS=[MD5]):
            made = off_loop(make_world)
        yield made
    reset_backends()


def test_the_allow_list_box_follows_the_network_select(
    asgi_server, team, chromium, screenshots
) -> None:
    print(f"\nscreenshots: {screenshots.directory}")
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{asgi_server}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{asgi_server}/")

    select = page.locator("#create-form select[name=network]")
    assert select.locator("option").all_inner_texts() == ["Off", "Allow-list", "Public internet"]
    allow = page.locator("#field-allow")
    allow.wait_for(state="hidden")  # "Off" is chosen: no list to give
    select.select_option("allowlist")
    allow.wait_for(state="visible")
    screenshots(page, "create-form-allowlist")
    assert page.get_attribute("#id_network", "aria-describedby") == "id_network_helptext"
    page.fill("#id_name", "browser-net")
    page.fill("#id_allow", "github.com:22,443")
    page.click("#create-submit")
    page.get_by_text("Sandbox browser-net is running.").wait_for()

    made = off_loop(lambda: Sandbox.objects.get(name="browser-net"))
    assert made.egress_mode == "allowlist" and made.egress_allow == ["github.com:22,443"]
    page.goto(f"{asgi_server}/sandboxes/{made.public_id}/")
    assert page.inner_text("#network-mode") == "Allow-list"
    assert "github.com:22,443" in page.inner_text("#network-allow")
    assert page.inner_text("#refused-none") == "No connection has been refused."
    screenshots(page, "sandbox-page")
    page.goto(f"{asgi_server}/team/network/")
    assert "github.com:22,443" in page.input_value("#id_allowlist")
    screenshots(page, "team-network")
    context.close()
