"""Tool arguments of the wrong type: what a real fastmcp.Client shows (one short line per
field, no pydantic report, no documentation URLs), and numbers or booleans sent as JSON
strings ("5", "true") taken where the schema asks for a number or a boolean. A live uvicorn
serving platform_site.asgi, the real Docker engine behind the tools."""

from __future__ import annotations

import pytest

from sandboxes.models import CommandExecution
from tenants.models import AuditLog
from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def _messages(asgi_server, key, calls) -> list[str]:
    async def conversation():
        said = []
        async with mcp(asgi_server, key) as client:
            for name, args in calls:
                result = await client.call_tool(name, args, raise_on_error=False)
                said.append(result.content[0].text if result.is_error else "no error")
        return said

    return run(conversation())


def test_wrong_types_get_one_short_line_per_field(asgi_server, world, shared_sandbox):
    box = {"sandbox_id": shared_sandbox}
    before = CommandExecution.objects.count()
    calls = [
        ("run_command", {**box, "command": "true", "timeout": "abc"}),
        ("run_command", {**box, "command": ["ls"], "timeout": True, "max_output_bytes": "lots"}),
        ("run_command", {**box}),
        ("run_command", {**box, "command": "true", "sudo": True}),
        ("create_sandbox", {"memory_mb": 10}),
        ("upload_files", {**box, "files": [{"path": "a", "content": "x", "executable": "yes"}]}),
        ("read_file", {**box, "path": "a", "encoding": "utf-8"}),
    ]
    said = _messages(asgi_server, world.keys["alice"], calls)
    assert said == [
        "timeout: expected a number, got 'abc'",
        'command: expected a string, got ["ls"]\n'
        "timeout: expected a number, got true\n"
        "max_output_bytes: expected an integer, got 'lots'",
        "command: required",
        "sudo: unexpected keyword argument (not one of this tool's arguments)",
        "memory_mb: must be greater than or equal to 64, got 10",
        "files[0].executable: expected true or false, got 'yes'",
        "encoding: must be 'auto', 'text' or 'base64', got 'utf-8'",
    ]
    for text in said:
        assert "http" not in text and "pydantic" not in text.lower(), text
    assert CommandExecution.objects.count() == before
    # The refusal's audit row has the same short words.
    row = AuditLog.objects.filter(outcome="invalid").order_by("-id").first()
    assert row is not None and "encoding: must be" in str(row.details), row.details


def test_numbers_and_booleans_sent_as_strings_are_taken(asgi_server, world, shared_sandbox):
    box = {"sandbox_id": shared_sandbox}

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            ran = await client.call_tool(
                "run_command",
                {**box, "command": "echo ok", "timeout": "5", "max_output_bytes": "2048"},
            )
            await client.call_tool(
                "upload_files",
                {
                    **box,
                    "files": [{"path": "tool.sh", "content": "#!/bin/sh\n", "executable": "true"}],
                },
            )
            mode = await client.call_tool(
                "run_command", {**box, "command": "stat -c %a tool.sh", "timeout": "2.5"}
            )
            return ran, mode

    ran, mode = run(conversation())
    assert ran.structured_content["stdout"] == "ok\n"
    assert mode.structured_content["stdout"] == "755\n"
