"""What the terminal browser tests share (test_browser_terminal*.py): a world of one team
with an owner and a viewer who sign in with a password, signing in, opening a terminal from
the sandbox page, and reading the terminal's screen. Not a test module."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal

PASSWORD = "correct-horse-battery"


def make_world(memory_mb: int = 256) -> dict[str, Any]:
    reset_backends()
    team = Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=3)
    users = {}
    for name, role in (("alice", Role.OWNER), ("victor", Role.VIEWER)):
        users[name] = get_user_model().objects.create_user(name, password=PASSWORD)
        Membership.objects.create(user=users[name], team=team, role=role)
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    principal = Principal(user=users["alice"], team=team, channel=Channel.WEB)
    sandbox = services.create_sandbox(principal, name="shell", memory_mb=memory_mb)
    return {"principal": principal, "sandbox": sandbox.id, **users}


def set_passwords(world: dict[str, Any]) -> None:
    """With the test's password hasher (tests/conftest.py makes hashing fast per test)."""
    for name in ("alice", "victor"):
        world[name].set_password(PASSWORD)
        world[name].save(update_fields=["password"])


def sign_in(chromium: Any, server: str, username: str) -> Any:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{server}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{server}/")
    return page


def open_terminal_from_sandbox_page(page: Any, server: str, sandbox_id: str) -> str:
    """Click "Open terminal"; the terminal page's URL once it is connected."""
    page.goto(f"{server}/sandboxes/{sandbox_id}/")
    page.click("#terminal-new")
    page.wait_for_url(f"{server}/sandboxes/{sandbox_id}/terminals/tm-*/")
    wait_connected(page)
    return page.url


def wait_connected(page: Any) -> None:
    page.wait_for_selector("#terminal-status[data-state=connected]")
    page.wait_for_selector("#terminal .xterm-rows")


def screen_text(page: Any) -> str:
    return page.inner_text("#terminal .xterm-rows")


def type_line(page: Any, text: str) -> None:
    page.click("#terminal")
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def wait_for_screen(page: Any, predicate_js: str) -> None:
    """Until the screen's text (the `text` of the function) passes the predicate."""
    page.wait_for_function(
        f"() => {{ const r = document.querySelector('#terminal .xterm-rows'); "
        f"const text = r ? r.innerText : ''; return {predicate_js}; }}"
    )
