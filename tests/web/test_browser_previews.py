"""Previews from the sandbox page in a real headless Chromium, against the live server and the
real Docker engine: a team member writes an index.html, deploys `python3 -m http.server`
from the page's form, clicks "Open" and reads the page served through the preview proxy, in
path mode (/preview/SANDBOX/PORT/, his session goes along) and in host mode
(PORT-SANDBOX.preview.localhost: Chromium resolves *.localhost to loopback; the link carries a
fresh token that the proxy swaps for a cookie). Then he stops it, and a deploy that crashes
shows the app's log in the page. Screenshots under the test's tmp_path (`pytest -s` prints
the path)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from sandboxes.models import Preview, Sandbox
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.web.helpers import off_loop

pytestmark = pytest.mark.docker

PASSWORD = "correct-horse-battery"
MARKER = "Hello from inside the sandbox"
INDEX = f"<!doctype html><title>app</title><h1 id='hello'>{MARKER}</h1>\n"
CRASH = "python3 -c 'import sys; print(\"crash-marker: no config\"); sys.exit(2)'"


def make_world() -> dict[str, Any]:
    reset_backends()
    team = Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=3)
    user = get_user_model().objects.create_user("maria", password=PASSWORD)
    Membership.objects.create(user=user, team=team, role=Role.MEMBER)
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    principal = Principal(user=user, team=team, channel=Channel.WEB)
    sandbox = services.create_sandbox(principal, name="previews", memory_mb=512)
    return {"team": team, "user": user, "principal": principal, "sandbox": sandbox.id}


def leftovers(world: dict[str, Any]) -> None:
    """Delete what the run left running (the container is real)."""
    for sandbox in Sandbox.objects.filter(team=world["team"]).live():
        services.delete_sandbox(world["principal"], sandbox.public_id)


def open_ports(sandbox_id: str) -> list[int]:
    rows = Preview.objects.open().filter(sandbox__public_id=sandbox_id).order_by("port")
    return list(rows.values_list("port", flat=True))


@pytest.fixture
def world(live_db, settings) -> Any:
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    settings.SANDHUB_PREVIEW_DOMAIN = ""
    made = off_loop(make_world)
    yield made
    off_loop(leftovers, made)
    reset_backends()


def open_preview(context: Any, page: Any, port: int) -> Any:
    """Click the row's "Open" (a new tab) and wait for the app's page in it."""
    with context.expect_page() as opened:
        page.locator(f"tr.preview-row[data-port='{port}'] a.preview-open").click()
    tab = opened.value
    tab.wait_for_load_state()
    tab.locator("#hello").wait_for()
    return tab


def test_deploy_and_open_a_preview_in_the_browser(
    asgi_server, world, chromium, screenshots, settings
):
    server, sandbox_id = asgi_server, world["sandbox"]
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)  # a deploy waits for the app
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the Stop button's confirm()
    print(f"\nscreenshots: {screenshots.directory}")

    page.goto(f"{server}/login/")
    page.fill("input[name=username]", "maria")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{server}/")
    page.goto(f"{server}/sandboxes/{sandbox_id}/")
    assert "No open previews" in page.inner_text("#previews")

    # The app's page, then the app, deployed from the form.
    page.fill("#new-file-form input[name=path]", "index.html")
    page.fill("#new-file-form textarea[name=content]", INDEX)
    page.click("#new-file-submit")
    page.locator("tr.file-row", has_text="index.html").wait_for()
    page.fill("#deploy-form textarea[name=deploy-command]", "python3 -m http.server 8000")
    page.fill("#deploy-form input[name=deploy-port]", "8000")
    page.click("#deploy-submit")
    row = page.locator("tr.preview-row[data-port='8000']")
    row.wait_for()
    assert "answers on port 8000" in page.inner_text(".messages")
    assert "running" in row.inner_text()
    screenshots(page, "previews-deployed")

    # Path mode: the plain address, with the member's session.
    tab = open_preview(context, page, 8000)
    assert tab.url == f"{server}/preview/{sandbox_id}/8000/"
    assert tab.inner_text("#hello") == MARKER
    screenshots(tab, "preview-path-mode")
    tab.close()

    # Host mode: a preview origin of its own; the link brings a token, the proxy a cookie.
    settings.SANDHUB_PREVIEW_DOMAIN = "preview.localhost"
    page.reload()
    tab = open_preview(context, page, 8000)
    address = urlsplit(tab.url)
    assert address.hostname == f"8000-{sandbox_id.replace('_', '-')}.preview.localhost"
    assert address.port == urlsplit(server).port and address.path == "/"
    assert services.PREVIEW_TOKEN_PARAM not in tab.url  # swapped for the cookie
    assert tab.inner_text("#hello") == MARKER
    cookies = context.cookies(tab.url)
    assert [c["name"] for c in cookies] == [services.PREVIEW_COOKIE]
    screenshots(tab, "preview-host-mode")
    tab.close()

    # Stop it: the row goes, and the address answers 404 now.
    row.locator("button.preview-stop").click()
    page.locator(".message", has_text="was stopped").wait_for()
    assert page.locator("tr.preview-row").count() == 0
    assert off_loop(open_ports, sandbox_id) == []
    screenshots(page, "previews-stopped")
    # (Through Chromium: playwright's own request API resolves names without *.localhost.)
    tab = context.new_page()
    gone = tab.goto(f"http://{address.netloc}/")
    assert gone is not None and gone.status == 404  # the cookie's token died with it
    tab.close()

    # A deploy that crashes: the app's last words are in the page.
    page.fill("#deploy-form textarea[name=deploy-command]", CRASH)
    page.fill("#deploy-form input[name=deploy-port]", "8001")
    page.fill("#deploy-form input[name=deploy-wait_seconds]", "20")
    page.click("#deploy-submit")
    error = page.locator("#deploy-error")
    error.wait_for()
    assert "crash-marker: no config" in error.inner_text()
    assert "exit code 2" in error.inner_text()
    assert off_loop(open_ports, sandbox_id) == []
    screenshots(page, "previews-deploy-failed")
    context.close()
    assert len(screenshots.taken) == 5
