"""The background-command MCP tools over streamable HTTP: a live uvicorn serving
platform_site.asgi, a real fastmcp.Client with a Bearer key, the real Docker engine.

No worker runs here: check_background reads the sandbox live and records the end itself
(supervision by a real qcluster is tested in tests/services/test_background_docker.py).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from fastmcp import Client

from sandboxes import services
from sandboxes.models import CommandExecution
from tenants.models import AuditLog, Channel
from tests.live import run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

VERBS = ("start", "check", "cancel")  # command.background.<verb> in the audit log


def mcp(server: str, key: str, **kwargs) -> Client:
    return Client(f"{server}/mcp/", auth=key, **kwargs)


def last_audit_id() -> int:
    return AuditLog.objects.order_by("-id").values_list("id", flat=True).first() or 0


def audit_since(start: int) -> list[AuditLog]:
    return list(AuditLog.objects.filter(id__gt=start).order_by("id"))


async def until_ended(client: Client, args: dict, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        check = (await client.call_tool("check_background", args)).structured_content
        if not check["running"]:
            return check
        if time.monotonic() > deadline:
            raise AssertionError(f"still running after {timeout:g} s: {check}")
        await asyncio.sleep(0.2)


async def error_of(client: Client, name: str, args: dict) -> str:
    result = await client.call_tool(name, args, raise_on_error=False)
    return result.content[0].text if result.is_error else "no error"


def test_tools_are_typed_with_limits(asgi_server, world):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return {tool.name: tool for tool in await client.list_tools()}

    tools = run(conversation())
    start = tools["start_background"].input_schema["properties"]
    assert start["max_runtime_seconds"]["anyOf"][0]["maximum"] == 3600
    assert start["command"]["maxLength"] == 100_000
    check = tools["check_background"].input_schema
    assert check["required"] == ["task_id"]
    assert check["properties"]["tail_lines"]["maximum"] == services.MAX_TAIL_LINES
    assert check["properties"]["task_id"]["minimum"] == 1
    out = tools["check_background"].output_schema["properties"]
    assert {"running", "status", "exit_code", "output", "elapsed_seconds", "log_path"} <= set(out)
    assert tools["cancel_background"].annotations.destructive_hint is True
    assert tools["check_background"].annotations.read_only_hint is True


@pytest.mark.audit_views
def test_start_check_finish_then_cancel_another(asgi_server, world, shared_sandbox):
    script = "echo begin; sleep 2; echo end >&2; exit 3"
    start = last_audit_id()

    async def conversation():
        # A handshake-era client has a session: its selection serves calls without an id.
        async with mcp(asgi_server, world.keys["alice"], mode="legacy") as client:
            await client.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            began = time.monotonic()
            started = (
                await client.call_tool(
                    "start_background", {"command": script, "max_runtime_seconds": 60}
                )
            ).structured_content
            start_seconds = time.monotonic() - began
            task = {"task_id": started["task_id"]}  # the selected sandbox, by default
            running = (await client.call_tool("check_background", task)).structured_content
            ended = await until_ended(client, task)
            tail = (
                await client.call_tool(
                    "check_background",
                    {**task, "sandbox_id": shared_sandbox, "tail_lines": 1},
                )
            ).structured_content

            other = (
                await client.call_tool(
                    "start_background",
                    {"sandbox_id": shared_sandbox, "command": "echo waiting; sleep 60"},
                )
            ).structured_content
            other_task = {"task_id": other["task_id"], "sandbox_id": shared_sandbox}
            cancelled = (await client.call_tool("cancel_background", other_task)).structured_content
            after = (await client.call_tool("check_background", other_task)).structured_content
            again = (await client.call_tool("cancel_background", other_task)).structured_content
            ps = (await client.call_tool("run_command", {"command": "ps -eo args"})).data
            return started, start_seconds, running, ended, tail, other, cancelled, after, again, ps

    started, start_seconds, running, ended, tail, other, cancelled, after, again, ps = run(
        conversation()
    )
    # Start returns at once with the task id, which is the command's id in the history.
    assert start_seconds < 2
    assert (started["status"], started["sandbox_id"], started["command"]) == (
        "running",
        shared_sandbox,
        script,
    )
    row = CommandExecution.objects.get(pk=started["task_id"])
    assert row.background and row.channel == Channel.MCP and row.actor == world.alice

    assert running["running"] and running["status"] == "running"
    assert running["exit_code"] is None and running["elapsed_seconds"] < 2
    assert running["log_path"].startswith("/run/sandhub/jobs/")  # out of /workspace

    assert (ended["running"], ended["status"], ended["exit_code"]) == (False, "failed", 3)
    assert ended["output"] == "begin\nend\n" and not ended["output_truncated"]
    assert ended["output_bytes"] == len("begin\nend\n")
    assert 2 <= ended["elapsed_seconds"] < 10 and ended["finished_at"]
    assert (tail["output"], tail["output_truncated"]) == ("end\n", True)
    row.refresh_from_db()
    assert (row.status, row.exit_code, row.stdout) == ("failed", 3, "begin\nend\n")

    assert (cancelled["status"], cancelled["running"]) == ("cancelled", False)
    assert after["status"] == again["status"] == "cancelled"
    assert "sleep 60" not in ps.stdout
    assert CommandExecution.objects.get(pk=other["task_id"]).status == "cancelled"

    rows = [r for r in audit_since(start) if r.action.startswith("command.background")]
    assert [r.action.rsplit(".", 1)[1] for r in rows] == (
        ["start"] + ["check"] * (len(rows) - 5) + ["start", "cancel", "check", "cancel"]
    )
    assert {(r.channel, r.actor_id, r.outcome) for r in rows} == {
        (Channel.MCP, world.alice.pk, "ok")
    }


@pytest.fixture
def running_task(world, shared_sandbox):
    """A background command of team A's shared sandbox, cancelled afterwards."""
    principal = world.principal()
    result = services.start_background(principal, shared_sandbox, "sleep 60")
    yield result.id
    services.cancel_background(principal, shared_sandbox, result.id)


def test_another_teams_key_gets_not_found(asgi_server, world, shared_sandbox, running_task):
    calls = [
        ("start_background", {"sandbox_id": shared_sandbox, "command": "touch /workspace/b"}),
        ("check_background", {"sandbox_id": shared_sandbox, "task_id": running_task}),
        ("cancel_background", {"sandbox_id": shared_sandbox, "task_id": running_task}),
    ]
    before = CommandExecution.objects.count()
    start = last_audit_id()

    async def conversation():
        async with mcp(asgi_server, world.keys["bob"]) as client:
            return [await error_of(client, name, args) for name, args in calls]

    for (name, _), message in zip(calls, run(conversation()), strict=True):
        assert message == f"sandbox {shared_sandbox} not found", (name, message)
    assert CommandExecution.objects.count() == before
    assert CommandExecution.objects.get(pk=running_task).status == "running"
    rows = audit_since(start)
    assert [r.action for r in rows] == [f"command.background.{n}" for n in VERBS]
    assert {(r.channel, r.actor_id, r.outcome) for r in rows} == {
        (Channel.MCP, world.bob.pk, "not_found")
    }


@pytest.mark.parametrize(
    "key_name, reason", [("alice_read", "no write scope"), ("victor", "a viewer may not")]
)
@pytest.mark.audit_views
def test_read_scope_and_viewer_keys_may_check_but_not_start_or_cancel(
    asgi_server, world, shared_sandbox, running_task, key_name, reason
):
    task = {"sandbox_id": shared_sandbox, "task_id": running_task}
    before = CommandExecution.objects.count()
    start = last_audit_id()

    async def conversation():
        async with mcp(asgi_server, world.keys[key_name]) as client:
            refused = [
                await error_of(
                    client, "start_background", {"sandbox_id": shared_sandbox, "command": "true"}
                ),
                await error_of(client, "cancel_background", task),
            ]
            checked = (await client.call_tool("check_background", task)).structured_content
            return refused, checked

    refused, checked = run(conversation())
    for message in refused:
        assert reason in message.replace("this API key has no write scope", "no write scope")
    assert checked["running"] and checked["task_id"] == running_task
    assert CommandExecution.objects.count() == before
    assert CommandExecution.objects.get(pk=running_task).status == "running"
    rows = audit_since(start)
    assert [(r.action, r.outcome) for r in rows] == [
        ("command.background.start", "forbidden"),
        ("command.background.cancel", "forbidden"),
        ("command.background.check", "ok"),
    ]
    assert {r.channel for r in rows} == {Channel.MCP}


def test_bad_input_gives_clear_errors(asgi_server, world, shared_sandbox):
    foreground = services.run_command(world.principal(), shared_sandbox, "true")
    before = CommandExecution.objects.count()
    cases = [
        ("start_background", {"command": "true", "max_runtime_seconds": 0}, "greater than 0"),
        (
            "start_background",
            {"command": "true", "max_runtime_seconds": 10**6},
            "less than or equal to 3600",
        ),
        ("start_background", {"command": "true", "nohup": True}, "unexpected keyword argument"),
        ("start_background", {"command": "  "}, "command is empty"),
        (
            "start_background",
            {"command": "true", "cwd": "/workspace/../../etc", "env": {"1X": "y"}},
            "not a valid variable name",
        ),
        ("check_background", {"task_id": 0}, "greater than or equal to 1"),
        ("check_background", {"task_id": 1, "tail_lines": -1}, "greater than or equal to 0"),
        ("check_background", {"task_id": 1, "tail_lines": 10**6}, "less than or equal to 10000"),
        ("cancel_background", {"task_id": "first"}, "expected an integer"),
        (
            "check_background",
            {"task_id": foreground.id, "sandbox_id": shared_sandbox},
            f"background command {foreground.id} not found in sandbox {shared_sandbox}",
        ),
        (
            "check_background",
            {"task_id": 10**9},
            f"selected sandbox {shared_sandbox} was searched); pass the sandbox_id",
        ),
        # Never the selection: cancelling names its sandbox.
        ("cancel_background", {"task_id": 10**9}, "sandbox_id"),
        (
            "check_background",
            {"task_id": 1, "sandbox_id": "sb_doesnotexist"},
            "sandbox sb_doesnotexist not found",
        ),
    ]

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"], mode="legacy") as client:
            await client.call_tool("select_sandbox", {"sandbox_id": shared_sandbox})
            return [await error_of(client, name, args) for name, args, _ in cases]

    for (name, args, expected), message in zip(cases, run(conversation()), strict=True):
        assert expected.lower() in message.lower(), (name, args, message)
    assert CommandExecution.objects.count() == before
