"""Live output over MCP: progress and log notifications while a command runs, none for a
command that is over before the first tick (its result carries the output). A live uvicorn,
a real fastmcp.Client, the real Docker engine."""

from __future__ import annotations

import time

import pytest

from sandboxes.models import CommandExecution
from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def test_progress_and_log_notifications_arrive_while_the_command_runs(
    asgi_server, world, shared_sandbox
):
    progress: list[tuple[float, str]] = []
    logs: list[tuple[float, str]] = []

    async def on_progress(value, total, message):
        progress.append((time.monotonic(), message or ""))

    async def on_log(message):
        data = message.data
        logs.append((time.monotonic(), data.get("msg", "") if isinstance(data, dict) else data))

    async def conversation():
        async with mcp(
            asgi_server, world.keys["alice"], progress_handler=on_progress, log_handler=on_log
        ) as client:
            result = await client.call_tool(
                "run_command",
                {
                    "sandbox_id": shared_sandbox,
                    "command": "for i in 1 2 3; do echo tick $i; sleep 1; done",
                },
            )
            return result, time.monotonic()

    result, finished = run(conversation())
    assert result.data.stdout == "tick 1\ntick 2\ntick 3\n"
    early = [message for at, message in progress if at < finished - 1.0]
    assert len(early) >= 2, progress  # not all bunched up at the end
    assert any("tick 1" in text for at, text in logs if at < finished - 1.5), logs
    assert "".join(text for _, text in logs) == "tick 1\ntick 2\ntick 3\n"


def test_a_quick_command_is_answered_by_its_result_alone(asgi_server, world, shared_sandbox):
    notified: list[object] = []

    async def on_progress(value, total, message):
        notified.append(("progress", message))

    async def on_log(message):
        notified.append(("log", message.data))

    async def conversation():
        async with mcp(
            asgi_server, world.keys["alice"], progress_handler=on_progress, log_handler=on_log
        ) as client:
            return await client.call_tool(
                "run_command", {"sandbox_id": shared_sandbox, "command": "echo quick; echo e >&2"}
            )

    result = run(conversation())
    assert (result.data.exit_code, result.data.stdout, result.data.stderr) == (0, "quick\n", "e\n")
    assert notified == []
    # Recorded like any other command.
    row = CommandExecution.objects.get(pk=result.data.command_id)
    assert (row.status, row.stdout, row.stderr) == ("succeeded", "quick\n", "e\n")
