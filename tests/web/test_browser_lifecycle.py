"""Pause, stop and resume in a real headless Chromium against the live server and the real
Docker engine: the buttons on the sandbox page (Stop asks first), the status badge, and the
runner resuming a paused sandbox and saying how long that took. Screenshots under the test's
tmp_path (`pytest -s` prints where)."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.web.helpers import off_loop

pytestmark = pytest.mark.docker

PASSWORD = "correct-horse-battery"


def make_world() -> dict[str, Any]:
    reset_backends()
    team = Team.objects.create(slug="alpha", name="Team Alpha")
    user = get_user_model().objects.create_user("alice", password=PASSWORD)
    Membership.objects.create(user=user, team=team, role=Role.OWNER)
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    principal = Principal(user=user, team=team, channel=Channel.WEB)
    info = services.create_sandbox(principal, name="napper", memory_mb=128)
    return {"principal": principal, "sandbox": info.id}


def leftovers(world: dict[str, Any]) -> None:
    if Sandbox.objects.get(public_id=world["sandbox"]).status != "deleted":
        services.delete_sandbox(world["principal"], world["sandbox"])


@pytest.fixture
def world(live_db, settings) -> Any:
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    made = off_loop(make_world)
    yield made
    off_loop(leftovers, made)
    reset_backends()


def test_pause_run_stop_and_start_in_the_browser(asgi_server, world, chromium, screenshots):
    server, sandbox_id = asgi_server, world["sandbox"]
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    print(f"\nscreenshots: {screenshots.directory}")
    page.goto(f"{server}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{server}/")

    page.goto(f"{server}/sandboxes/{sandbox_id}/")
    page.click("#lifecycle-actions button.pause-sandbox")
    page.wait_for_selector("#sandbox-status.status-paused")
    assert "is paused" in page.inner_text(".messages")
    screenshots(page, "paused")

    page.fill("#run-form textarea[name=command]", "echo awake")
    page.click("#run-submit")
    page.wait_for_function(
        "() => document.querySelector('#run-exit').textContent.trim() !== ''", polling=100
    )
    assert page.inner_text("#run-output").strip() == "awake"
    assert "resumed the sandbox first" in page.inner_text("#run-duration")
    assert page.inner_text("#sandbox-status") == "running"
    screenshots(page, "resumed-by-a-command")

    page.reload()
    page.click("#lifecycle-actions button.stop-sandbox")
    page.wait_for_selector("#sandbox-status.status-stopped")
    assert asked and "Stop sandbox napper?" in asked[0]
    screenshots(page, "stopped")
    page.click("#lifecycle-actions button.resume-sandbox")
    page.wait_for_selector("#sandbox-status.status-running")
    screenshots(page, "started-again")
    context.close()
