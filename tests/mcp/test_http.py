"""The MCP endpoint over streamable HTTP: a live uvicorn serving platform_site.asgi, a real
fastmcp.Client with a Bearer key, the real Docker engine behind the services. The catalog, a
whole flow, resources and prompts, timeouts, run_once and large downloads here; who may do
what, audit rows and bad input in test_access.py."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx2 as httpx
import pytest
from fastmcp.exceptions import ToolError

from sandboxes.models import Sandbox
from tests.live import CALC, EXPECTED_TOOLS, TEST_CALC, mcp, run

pytestmark = [
    pytest.mark.docker,
    # Log notifications still reach clients on the older protocol; the SDK warns about them.
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def test_catalog_every_tool_described_typed_and_strict(asgi_server, world):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return await client.list_tools()

    tools = {tool.name: tool for tool in run(conversation())}
    assert set(tools) == EXPECTED_TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 40, tool.name
        schema = tool.input_schema
        assert schema.get("additionalProperties") is False, tool.name
        for name, prop in schema.get("properties", {}).items():
            assert prop.get("description") or "$ref" in json.dumps(prop), (tool.name, name)
        assert tool.output_schema and tool.output_schema.get("type") == "object", tool.name
    assert tools["run_command"].input_schema["properties"]["timeout"]["anyOf"][0]["maximum"] > 0
    assert "sandbox_id" in tools["read_file"].input_schema["properties"]


def test_flow_create_upload_run_test_read_download_delete(asgi_server, world):
    """The agent's day: everything through MCP (pytest itself is put in by the test)."""
    project = [
        {"path": "proj/calc.py", "content": CALC},
        {"path": "proj/test_calc.py", "content": TEST_CALC},
        {
            "path": "proj/blob.bin",
            "content": base64.b64encode(b"\x00\xff\x10").decode(),
            "encoding": "base64",
        },
    ]

    async def conversation():
        # A handshake-era client: create_sandbox selects the new sandbox in its session, so
        # the calls after it may leave sandbox_id out (delete_sandbox never may).
        async with mcp(asgi_server, world.keys["alice"], mode="legacy") as client:
            created = (await client.call_tool("create_sandbox", {})).data
            sandbox_id = created.id
            assert created.status == "running" and created.selected
            uploaded = await client.call_tool("upload_files", {"files": project})
            ran = await client.call_tool(
                "run_command", {"command": "ls proj && python3 -c 'print(6*7)'"}
            )
            tests = await client.call_tool("run_tests", {"cwd": "proj"})
            read = await client.call_tool("read_file", {"path": "proj/calc.py"})
            # The download URL works for whoever holds a key (or a session) of the team.
            fetched = await asyncio.to_thread(
                httpx.get,
                read.structured_content["download_url"],
                headers={"Authorization": f"Bearer {world.keys['alice']}"},
            )
            assert fetched.status_code == 200 and fetched.text == CALC
            downloaded = await client.call_tool("download_files", {"paths": ["proj"]})
            active = await client.call_tool("get_active_sandbox", {})
            deleted = await client.call_tool("delete_sandbox", {"sandbox_id": sandbox_id})
            after = await client.call_tool("get_active_sandbox", {})
            return sandbox_id, uploaded, ran, tests, read, downloaded, active, deleted, after

    sandbox_id, uploaded, ran, tests, read, downloaded, active, deleted, after = run(conversation())
    assert uploaded.structured_content["paths"] == [
        "/workspace/proj/calc.py",
        "/workspace/proj/test_calc.py",
        "/workspace/proj/blob.bin",
    ]
    assert ran.structured_content["exit_code"] == 0
    assert "test_calc.py" in ran.structured_content["stdout"] and "42" in ran.data.stdout

    report = tests.structured_content
    assert report["report_found"] and report["exit_code"] == 1
    assert (report["passed"], report["failed"], report["errors"], report["skipped"]) == (2, 1, 0, 0)
    assert report["total"] == 3
    [failure] = report["failures"]
    assert failure["name"] == "test_calc.test_add_wrong"
    assert "two and two make four" in failure["message"]
    assert "--junitxml=" in report["command"]

    assert read.structured_content["content"] == CALC and read.structured_content["eof"]
    assert read.structured_content["download_url"].startswith(asgi_server + "/api/v1/sandboxes/")
    files = {f["path"]: f for f in downloaded.structured_content["files"]}
    assert files["/workspace/proj/calc.py"]["content"] == CALC
    blob = files["/workspace/proj/blob.bin"]
    assert blob["encoding"] == "base64" and base64.b64decode(blob["content"]) == b"\x00\xff\x10"
    assert active.structured_content["sandbox"]["id"] == sandbox_id
    assert deleted.structured_content["status"] == "deleted"
    assert after.structured_content["sandbox"] is None
    assert Sandbox.objects.get(public_id=sandbox_id).status == "deleted"


def test_resources_and_prompts_are_readable(asgi_server, world, shared_sandbox):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            await client.call_tool(
                "run_command", {"sandbox_id": shared_sandbox, "command": "echo for-the-logs"}
            )
            resources = await client.list_resources()
            templates = await client.list_resource_templates()
            listing = await client.read_resource("sandbox://list")
            status = await client.read_resource(f"sandbox://{shared_sandbox}/status")
            logs = await client.read_resource(f"sandbox://{shared_sandbox}/logs")
            prompts = await client.list_prompts()
            rendered = [
                await client.get_prompt("test-in-sandbox", {"project": "./app"}),
                await client.get_prompt("debug-in-sandbox", {"problem": "ImportError: x"}),
                await client.get_prompt("deploy-to-sandbox", {"start_command": "python3 app.py"}),
            ]
            return resources, templates, listing, status, logs, prompts, rendered

    resources, templates, listing, status, logs, prompts, rendered = run(conversation())
    assert "sandbox://list" in {str(r.uri) for r in resources}
    assert {t.uri_template for t in templates} == {
        "sandbox://{sandbox_id}/status",
        "sandbox://{sandbox_id}/logs",
    }
    assert shared_sandbox in {s["id"] for s in json.loads(listing[0].text)}
    assert json.loads(status[0].text)["status"] == "running"
    newest = json.loads(logs[0].text)[0]
    assert newest["command"] == "echo for-the-logs" and newest["exit_code"] == 0
    assert newest["stdout_tail"] == "for-the-logs\n"
    assert {p.name for p in prompts} == {"test-in-sandbox", "debug-in-sandbox", "deploy-to-sandbox"}
    texts = [r.messages[0].content.text for r in rendered]
    assert "./app" in texts[0] and "run_tests" in texts[0]
    assert "ImportError: x" in texts[1]
    assert "python3 app.py" in texts[2]


def test_timeouts_and_long_output(asgi_server, world, shared_sandbox):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            with pytest.raises(ToolError) as timed_out:
                await client.call_tool(
                    "run_command",
                    {
                        "sandbox_id": shared_sandbox,
                        "command": "echo started; sleep 10",
                        "timeout": 1,
                    },
                )
            long = await client.call_tool(
                "run_command",
                {"sandbox_id": shared_sandbox, "max_output_bytes": 4096, "command": "seq 1 100000"},
            )
            return str(timed_out.value), long.structured_content

    message, long = run(conversation())
    assert message.startswith("timed out after 1 s") and "output so far: started" in message
    assert long["stdout_truncated"] and long["stdout_bytes"] == 588895
    assert long["stdout"].startswith("1\n2\n3\n") and long["stdout"].endswith("99999\n100000\n")
    assert "bytes cut]" in long["stdout"]


def test_run_once_creates_runs_and_deletes(asgi_server, world):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return await client.call_tool(
                "run_once",
                {
                    "command": "cat hello.txt && hostname",
                    "files": [{"path": "hello.txt", "content": "hi there\n"}],
                },
            )

    result = run(conversation()).structured_content
    assert result["deleted"] and result["result"]["stdout"].startswith("hi there\n")
    assert Sandbox.objects.get(public_id=result["sandbox_id"]).status == "deleted"


def test_download_files_refuses_over_max_total_bytes_with_a_download_url(
    asgi_server, world, shared_sandbox
):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            await client.call_tool(
                "write_file",
                {"sandbox_id": shared_sandbox, "path": "limit.txt", "content": "x" * 100},
            )
            return await client.call_tool(
                "download_files",
                {"sandbox_id": shared_sandbox, "paths": ["limit.txt"], "max_total_bytes": 10},
                raise_on_error=False,
            )

    result = run(conversation())
    message = result.content[0].text
    assert result.is_error and "more than 10 bytes" in message
    assert "max_total_bytes=10" in message and "/files/download?path=limit.txt" in message
