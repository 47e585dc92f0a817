"""The team's day in a real headless Chromium against the live server and the real Docker
engine: log in, create a sandbox, open it, watch a command's output arrive while it runs,
upload a file and download it byte-identical, open its signed link with no session, make an
API key and use it over MCP, delete the sandbox. Every page is saved as a screenshot under
the test's tmp_path (the path is printed; `pytest -s` shows it)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from fastmcp import Client

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from sandboxes.models import Sandbox, SandboxStatus
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.web.helpers import off_loop

pytestmark = pytest.mark.docker

PASSWORD = "correct-horse-battery"
COMMAND = "for i in 1 2 3; do echo $i; sleep 1; done"
# Every byte value, and more than one read's worth, so any re-encoding would show.
PAYLOAD = bytes(range(256)) * 1024 + os.urandom(4096)


def make_world() -> dict[str, Any]:
    reset_backends()
    team = Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=3)
    user = get_user_model().objects.create_user("alice", password=PASSWORD)
    Membership.objects.create(user=user, team=team, role=Role.OWNER)
    get_user_model().objects.create_user("bruno", password=PASSWORD)  # in no team yet
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    services.probe_all_hosts(Principal.system())  # load figures for the Hosts page's bars
    return {"team": team, "user": user}


def leftovers(world: dict[str, Any]) -> None:
    """Delete what a failed run left running (the container is real)."""
    principal = Principal(user=world["user"], team=world["team"], channel=Channel.WEB)
    for sandbox in Sandbox.objects.filter(team=world["team"]).live():
        services.delete_sandbox(principal, sandbox.public_id)


def mcp_list_sandboxes(server: str, key: str) -> Any:
    async def conversation() -> Any:
        async with Client(f"{server}/mcp/", auth=key) as client:
            return (await client.call_tool("list_sandboxes", {})).structured_content

    return asyncio.run(conversation())


@pytest.fixture
def world(live_db, settings) -> Any:
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    made = off_loop(make_world)
    yield made
    off_loop(leftovers, made)
    reset_backends()


def test_team_day_in_the_browser(asgi_server, world, chromium, screenshots, tmp_path):
    server = asgi_server
    context = chromium.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the delete button's confirm()
    print(f"\nscreenshots: {screenshots.directory}")

    # Log in.
    page.goto(f"{server}/")
    assert page.url.startswith(f"{server}/login/")
    screenshots(page, "login")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{server}/")
    assert "No sandboxes yet" in page.inner_text("main")
    screenshots(page, "home-empty")

    # Create a sandbox.
    page.fill("#create-form input[name=name]", "browser-flow")
    page.fill("#create-form input[name=memory_mb]", "512")
    page.click("#create-submit")
    row = page.locator("tr.sandbox-row", has_text="browser-flow")
    row.wait_for()
    assert "running" in row.inner_text()
    sandbox_id = row.get_attribute("data-sandbox-id")
    screenshots(page, "home-with-sandbox")
    page.set_viewport_size({"width": 390, "height": 844})
    screenshots(page, "home-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    # Open it and run a command: its first line shows before it ends.
    row.locator("a.sandbox-link").click()
    page.wait_for_url(f"{server}/sandboxes/{sandbox_id}/")
    screenshots(page, "sandbox")
    page.fill("#run-form textarea[name=command]", COMMAND)
    started = time.monotonic()
    page.click("#run-submit")
    seen = page.wait_for_function(
        """() => {
            const out = document.querySelector('#run-output');
            if (!out || !out.textContent.includes('1')) return null;
            const exit = document.querySelector('#run-exit');
            return {output: out.textContent, exit: exit ? exit.textContent.trim() : ''};
        }""",
        polling=50,
    ).json_value()
    first_line_after = time.monotonic() - started
    assert seen["exit"] == "", f"the exit code was already shown: {seen}"
    assert "3" not in seen["output"], f"the whole output came at once: {seen}"
    screenshots(page, "sandbox-running")
    page.wait_for_function(
        "() => document.querySelector('#run-exit').textContent.trim() !== ''", polling=100
    )
    assert page.inner_text("#run-exit").strip() == "0"
    assert page.inner_text("#run-output").split() == ["1", "2", "3"]
    assert time.monotonic() - started > first_line_after + 1  # it did take its seconds
    screenshots(page, "sandbox-ran")

    # Upload a file, then download it byte-identical.
    upload = tmp_path / "payload.bin"
    upload.write_bytes(PAYLOAD)
    page.set_input_files("#upload-form input[name=files]", [str(upload)])
    page.click("#upload-submit")
    file_row = page.locator("tr.file-row", has_text="payload.bin")
    file_row.wait_for()
    screenshots(page, "sandbox-files")
    with page.expect_download() as download_info:
        file_row.locator("a.download").click()
    downloaded = Path(download_info.value.path())
    assert downloaded.read_bytes() == PAYLOAD

    # A signed link opens in a fresh context: no session, no cookie.
    file_row.locator("button.copy-link").click()
    link_input = file_row.locator("input.file-link")
    link_input.wait_for()
    link = link_input.input_value()
    assert link.startswith(f"{server}/")
    screenshots(page, "sandbox-file-link")
    stranger = chromium.new_context(accept_downloads=True)
    try:
        assert stranger.cookies() == []
        answer = stranger.request.get(link)
        assert answer.status == 200, answer.text()[:300]
        assert answer.body() == PAYLOAD
        # The same page without the link's signature is closed to a stranger.
        refused = stranger.request.get(f"{server}/sandboxes/{sandbox_id}/", max_redirects=0)
        assert refused.status == 302 and "/login/" in refused.headers["location"]
    finally:
        stranger.close()

    # The other pages.
    page.goto(f"{server}/hosts/")
    assert "local" in page.inner_text("main")
    screenshots(page, "hosts")
    page.goto(f"{server}/team/")
    page.fill("#add-member-form input[name=username]", "bruno")
    page.select_option("#add-member-form select[name=role]", "viewer")
    page.click("#add-member-form button[type=submit]")
    page.locator("tr.member-row[data-username=bruno]").wait_for()
    assert page.input_value("tr.member-row[data-username=bruno] select[name=role]") == "viewer"
    screenshots(page, "team-members")
    page.goto(f"{server}/team/audit/")
    assert "sandbox.create" in page.inner_text("#audit-table")
    screenshots(page, "team-audit")
    page.goto(f"{server}/team/commands/")
    assert COMMAND in page.inner_text("#command-table")
    screenshots(page, "team-commands")

    # An API key, used over MCP from here.
    page.goto(f"{server}/keys/")
    screenshots(page, "keys-empty")
    page.fill("#key-form input[name=name]", "browser test")
    page.click("#key-submit")
    page.locator("#created-key").wait_for()
    key = page.input_value("#new-key")
    assert key.startswith("shk_")
    claude_line = page.input_value("#claude-line")
    assert claude_line == (
        f"claude mcp add --transport http sandhub {server}/mcp/ "
        f'--header "Authorization: Bearer {key}"'
    )
    assert json.loads(page.input_value("#mcp-json"))["mcpServers"]["sandhub"]["url"] == (
        f"{server}/mcp/"
    )
    screenshots(page, "keys-created")
    listed = off_loop(mcp_list_sandboxes, server, key)
    assert sandbox_id in json.dumps(listed)
    page.goto(f"{server}/keys/")
    assert "from 127.0.0.1" in page.locator("tr.key-row").first.inner_text()
    screenshots(page, "keys-used")

    # Delete the sandbox (the confirm() is accepted).
    page.goto(f"{server}/")
    page.locator("tr.sandbox-row", has_text="browser-flow").locator("button.delete-sandbox").click()
    page.locator(".message", has_text="was deleted").wait_for()
    assert page.locator("tr.sandbox-row").count() == 0
    screenshots(page, "home-after-delete")
    status = off_loop(lambda: Sandbox.objects.get(public_id=sandbox_id).status)
    assert status == SandboxStatus.DELETED
    # Its link is revoked with it.
    after = chromium.new_context()
    try:
        assert after.request.get(link).status == 404
    finally:
        after.close()
    context.close()
    assert len(screenshots.taken) >= 14
