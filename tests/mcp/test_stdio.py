"""The same tools over stdio: `python manage.py mcp --api-key KEY` in a subprocess, driven by a
real fastmcp.Client, against the test database and the real Docker engine."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from sandboxes.models import Sandbox
from tenants import apikeys
from tenants.models import AuditLog, Channel, Team
from tests.live import CALC, EXPECTED_TOOLS, ROOT, TEST_CALC, in_thread, run, subprocess_env

pytestmark = pytest.mark.docker


def stdio(key: str | None, progress_handler=None, **env: str) -> Client:
    args = ["manage.py", "mcp"] + (["--api-key", key] if key else [])
    transport = StdioTransport(
        command=sys.executable,
        args=args,
        env=subprocess_env(**env),
        cwd=str(ROOT),
        keep_alive=False,
    )
    return Client(transport, timeout=120, progress_handler=progress_handler)


@pytest.fixture
def team_audits_views(world):
    """The server runs in a process of its own: its team asks for views in the database."""
    Team.objects.filter(pk=world.team_a.pk).update(audit_views=True)
    yield
    Team.objects.filter(pk=world.team_a.pk).update(audit_views=False)


@pytest.mark.usefixtures("team_audits_views")
def test_flow_over_stdio(world):
    start = AuditLog.objects.order_by("-id").values_list("id", flat=True).first() or 0
    progress: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message or "")

    async def conversation():
        async with stdio(world.keys["alice"], progress_handler=on_progress) as client:
            tools = {tool.name for tool in await client.list_tools()}
            created = (await client.call_tool("create_sandbox", {})).data
            await client.call_tool(
                "upload_files",
                {
                    "files": [
                        {"path": "calc.py", "content": CALC},
                        {"path": "test_calc.py", "content": TEST_CALC},
                    ]
                },
            )
            ran = await client.call_tool("run_command", {"command": "echo one; sleep 1; echo two"})
            tests = await client.call_tool(
                "run_tests", {"command": "python3 -m pytest -q -p no:cacheprovider"}
            )
            read = await client.call_tool("read_file", {"path": "calc.py"})
            downloaded = await client.call_tool("download_files", {"paths": ["test_calc.py"]})
            status = await client.read_resource(f"sandbox://{created.id}/status")
            deleted = await client.call_tool("delete_sandbox", {"sandbox_id": created.id})
            return tools, created, ran, tests, read, downloaded, status, deleted

    tools, created, ran, tests, read, downloaded, status, deleted = run(conversation())
    assert tools == EXPECTED_TOOLS
    assert ran.data.stdout == "one\ntwo\n"
    assert any("last output: one" in message for message in progress), progress
    report = tests.structured_content
    assert (report["passed"], report["failed"]) == (2, 1)
    assert report["failures"][0]["name"] == "test_calc.test_add_wrong"
    assert read.structured_content["content"] == CALC
    # Over stdio there is no web address to offer: the download URL is relative.
    assert read.structured_content["download_url"].startswith("/api/v1/sandboxes/")
    assert downloaded.structured_content["files"][0]["content"] == TEST_CALC
    assert '"status": "running"' in status[0].text
    assert deleted.structured_content["status"] == "deleted"
    assert Sandbox.objects.get(public_id=created.id).status == "deleted"

    rows = AuditLog.objects.filter(id__gt=start)
    assert rows.filter(channel=Channel.MCP, actor=world.alice).count() >= 8
    assert not rows.exclude(channel=Channel.MCP).exclude(action="files.upload").exists()
    assert set(rows.values_list("source_address", flat=True)) == {None}


def test_each_stdio_process_has_a_selection_of_its_own(world, shared_sandbox):
    """One MCP session per process: a second server with the same key selects nothing."""

    async def conversation():
        async with stdio(world.keys["alice"]) as first, stdio(world.keys["alice"]) as second:
            await first.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            mine = await first.call_tool("run_command", {"command": "echo first"})
            theirs = await second.call_tool("get_active_sandbox", {})
            refused = await second.call_tool(
                "run_command", {"command": "echo second"}, raise_on_error=False
            )
            return mine, theirs, refused

    mine, theirs, refused = run(conversation())
    assert mine.structured_content["stdout"] == "first\n"
    assert theirs.structured_content["sandbox"] is None
    assert refused.is_error
    assert "no sandbox is selected in this MCP session" in refused.content[0].text


@pytest.mark.parametrize("key_name", [None, "wrong", "expired", "revoked"])
def test_an_invalid_key_stops_the_server_at_once_with_a_clear_error(world, key_name):
    key = world.keys.get(key_name or "", "shk_aaaaaaaa_" + "z" * 43) if key_name else None
    args = [sys.executable, "manage.py", "mcp"] + (["--api-key", key] if key else [])
    done = subprocess.run(
        args, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert done.stdout == ""  # stdout belongs to the protocol
    expected = "no API key" if key is None else "invalid API key"
    assert expected in done.stderr
    if key:
        assert key not in done.stderr


def test_key_from_the_environment_and_revocation_while_running(world):
    key = apikeys.create_key(world.alice, world.team_a, name="stdio-env")

    async def conversation():
        async with stdio(None, SANDHUB_API_KEY=key.plaintext) as client:
            before = await client.call_tool("list_sandboxes", {})
            await in_thread(apikeys.revoke, key.key)
            after = await client.call_tool("list_sandboxes", {}, raise_on_error=False)
            return before, after

    before, after = run(conversation())
    assert not before.is_error
    assert after.is_error and "no longer valid" in after.content[0].text


def test_read_scope_key_is_refused_writes_over_stdio(world):
    async def conversation():
        async with stdio(world.keys["alice_read"]) as client:
            return await client.call_tool("create_sandbox", {}, raise_on_error=False)

    result = run(conversation())
    assert result.is_error and "no write scope" in result.content[0].text
