"""`sandhub mcp`: the local stdio server started as Claude Code would (`sandhub mcp --root DIR`
in a subprocess), driven by a real fastmcp.Client, proxying a live platform (uvicorn serving
platform_site.asgi, real Docker sandboxes) and syncing real local directories."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastmcp import Client
from fastmcp.exceptions import ToolError

from tests.client.helpers import SERVER, local_server, server_env
from tests.live import CALC, EXPECTED_TOOLS, TEST_CALC, free_port, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

LOCAL_TOOLS = {
    "sync_local_to_remote",
    "sync_remote_to_local",
    "upload_local_path",
    "download_to_local_path",
}


def platform(server: str, key: str) -> Client:
    return Client(f"{server}/mcp/", auth=key)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- the proxy against a live platform ------------------------------------------------------


def test_platform_tools_forwarded_with_their_schemas(asgi_server, world, tmp_path):
    async def conversation():
        async def catalog(client: Client):
            templates = await client.list_resource_templates()
            return (
                sorted(str(item.uri) for item in await client.list_resources()),
                sorted(item.uri_template for item in templates),
                sorted(item.name for item in await client.list_prompts()),
            )

        async with platform(asgi_server, world.keys["alice"]) as direct:
            upstream, upstream_rest = await direct.list_tools(), await catalog(direct)
        async with local_server(asgi_server, world.keys["alice"], [tmp_path], tmp_path) as client:
            rest = await catalog(client)
            return upstream, await client.list_tools(), client.instructions, upstream_rest, rest

    upstream, proxied, instructions, upstream_rest, rest = run(conversation())
    # Resources, resource templates and prompts are forwarded too.
    assert rest == upstream_rest and all(rest), rest
    tools = {tool.name: tool for tool in proxied}
    assert set(tools) == EXPECTED_TOOLS | LOCAL_TOOLS
    for tool in upstream:  # unchanged: name, description, schemas, annotations
        forwarded = tools[tool.name]
        assert forwarded.description == tool.description
        assert forwarded.input_schema == tool.input_schema, tool.name
        assert forwarded.output_schema == tool.output_schema, tool.name
        assert forwarded.annotations == tool.annotations, tool.name
    sync_schema = tools["sync_local_to_remote"].input_schema
    assert set(sync_schema["required"]) == {"local_path", "remote_path"}
    assert set(sync_schema["properties"]) == {
        "local_path",
        "remote_path",
        "sandbox_id",
        "delete",
        "excludes",
        "dry_run",
    }
    assert tools["sync_remote_to_local"].annotations.destructive_hint is True
    assert str(tmp_path.resolve()) in (instructions or "")


def test_seed_workflow_sync_run_tests_sync_back(asgi_server, world, tmp_path):
    """The seed's loop through the local server: create a sandbox, sync the project up, run
    its tests on the platform (output streaming back), bring the report home."""
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "calc.py").write_text(CALC)
    (project / "test_calc.py").write_text(TEST_CALC)
    (project / "pkg" / "__init__.py").write_text("")
    (project / "run.sh").write_text("#!/bin/sh\npython3 -m pytest -q -p no:cacheprovider\n")
    (project / "run.sh").chmod(0o755)
    (project / ".gitignore").write_text("*.log\n")
    (project / "debug.log").write_text("not sent: ignored by .gitignore\n")
    progress: list[str] = []
    logs: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message or "")

    async def on_log(message):
        data = message.data
        logs.append(data.get("msg", "") if isinstance(data, dict) else str(data))

    async def conversation():
        async with local_server(
            asgi_server,
            world.keys["alice"],
            None,
            tmp_path,
            progress_handler=on_progress,
            log_handler=on_log,
        ) as client:
            created = (await client.call_tool("create_sandbox", {})).structured_content
            try:
                pushed = await client.call_tool(
                    "sync_local_to_remote", {"local_path": "project", "remote_path": "proj"}
                )
                again = await client.call_tool(
                    "sync_local_to_remote", {"local_path": "project", "remote_path": "proj"}
                )
                ran = await client.call_tool(
                    "run_command",
                    {"command": "echo one; sleep 1; echo two; ./run.sh | tail -1", "cwd": "proj"},
                )
                tests = await client.call_tool(
                    "run_tests",
                    {
                        "command": "python3 -m pytest -q -p no:cacheprovider",
                        "junit_report": False,
                        "report_path": "/workspace/proj/reports/junit.xml",
                        "cwd": "proj",
                        "env": {"PYTEST_ADDOPTS": "--junitxml=reports/junit.xml"},
                    },
                )
                digest = await client.call_tool(
                    "run_command",
                    {"command": "sha256sum reports/junit.xml; stat -c %a:%Y run.sh", "cwd": "proj"},
                )
                pulled = await client.call_tool(
                    "sync_remote_to_local", {"remote_path": "proj", "local_path": "back"}
                )
                fetched = await client.call_tool(
                    "download_to_local_path",
                    {
                        "remote_path": "/workspace/proj/reports/junit.xml",
                        "local_path": "single.xml",
                    },
                )
            finally:
                await client.call_tool("delete_sandbox", {"sandbox_id": created["id"]})
            return created, pushed, again, ran, tests, digest, pulled, fetched

    created, pushed, again, ran, tests, digest, pulled, fetched = run(conversation())
    sent = pushed.structured_content
    assert sent["sandbox_id"] == created["id"]  # the selected sandbox, sandbox_id omitted
    assert sent["remote_path"] == "/workspace/proj"
    assert sorted(sent["sent"]) == [
        ".gitignore",
        "calc.py",
        "pkg/",
        "pkg/__init__.py",
        "run.sh",
        "test_calc.py",
    ]
    assert again.structured_content["sent"] == [] and again.structured_content["unchanged"] == 5
    assert ran.structured_content["stdout"].startswith("one\ntwo\n")
    assert "1 failed, 2 passed" in ran.structured_content["stdout"]
    report = tests.structured_content
    assert (report["passed"], report["failed"]) == (2, 1)
    # Output of a forwarded call streams through the proxy as it runs.
    assert any("one" in message for message in progress), progress
    assert any("one" in line for line in logs), logs
    # The report comes home byte-identical (the sandbox's own checksum), modes and mtimes kept.
    remote_sum, remote_stat = digest.structured_content["stdout"].split("\n")[:2]
    back = tmp_path / "back"
    assert sha256(back / "reports" / "junit.xml") == remote_sum.split()[0]
    assert "reports/junit.xml" in pulled.structured_content["sent"]
    info = (back / "run.sh").stat()
    assert f"{info.st_mode & 0o777:o}:{int(info.st_mtime)}" == remote_stat
    assert (back / "calc.py").read_text() == CALC
    assert not (back / "debug.log").exists()
    assert fetched.structured_content["local_path"] == str(tmp_path / "single.xml")
    assert (tmp_path / "single.xml").read_bytes() == (back / "reports" / "junit.xml").read_bytes()


def test_paths_outside_the_roots_are_refused_and_nothing_moves(
    asgi_server, world, shared_sandbox, tmp_path
):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "project").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET-1234\n")
    (root / "project" / "ok.txt").write_text("fine\n")
    (root / "escape").symlink_to(outside)  # a link inside the root that points out of it
    (root / "project" / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "pulled").mkdir()
    (root / "pulled" / "escape").symlink_to(outside)
    before = sorted(p.name for p in outside.iterdir())
    remote = "/workspace/refusals"
    outward = [str(outside), "../outside", "escape", "escape/secret.txt", "escape/new"]

    async def conversation():
        refusals: list[tuple[str, str, str]] = []
        roots = [root, tmp_path / "other"]
        async with local_server(asgi_server, world.keys["alice"], roots, root) as client:
            for local in outward:
                for tool, args in [
                    ("sync_local_to_remote", {"local_path": local, "remote_path": remote}),
                    ("upload_local_path", {"local_path": local, "remote_path": remote}),
                    ("sync_remote_to_local", {"remote_path": "/etc", "local_path": local}),
                    (
                        "download_to_local_path",
                        {"remote_path": "/etc/hostname", "local_path": local},
                    ),
                ]:
                    with pytest.raises(ToolError) as refused:
                        await client.call_tool(tool, {**args, "sandbox_id": shared_sandbox})
                    refusals.append((tool, local, str(refused.value)))
            after = await client.call_tool(
                "run_command",
                {
                    "sandbox_id": shared_sandbox,
                    "command": f"ls -A {remote}; grep -rs SECRET /workspace; true",
                },
            )
            # A project inside the root may hold links pointing out: they travel as links,
            # never as the content they point at.
            pushed = await client.call_tool(
                "sync_local_to_remote",
                {"sandbox_id": shared_sandbox, "local_path": "project", "remote_path": remote},
            )
            seen = await client.call_tool(
                "run_command",
                {
                    "sandbox_id": shared_sandbox,
                    "command": f"readlink {remote}/leak.txt; grep -rs SECRET /workspace; "
                    "mkdir -p hostile/escape && echo pwn > hostile/escape/pwn.txt",
                },
            )
            # Pulling into a directory whose link points out replaces the link, never writes
            # through it (a sandbox's files are as untrusted as the agent's paths).
            await client.call_tool(
                "sync_remote_to_local",
                {"sandbox_id": shared_sandbox, "remote_path": "hostile", "local_path": "pulled"},
            )
            # The second --root is allowed too (absolute paths; relative ones start at the first).
            second = await client.call_tool(
                "download_to_local_path",
                {
                    "sandbox_id": shared_sandbox,
                    "remote_path": f"{remote}/ok.txt",
                    "local_path": str(tmp_path / "other"),
                },
            )
        async with local_server(asgi_server, world.keys["dave"], [root], root) as client:
            with pytest.raises(ToolError) as unselected:  # dave's key never selected one
                await client.call_tool(
                    "sync_local_to_remote", {"local_path": "project", "remote_path": remote}
                )
        return refusals, after, pushed, seen, second, str(unselected.value)

    refusals, after, pushed, seen, second, unselected = run(conversation())
    assert len(refusals) == 4 * len(outward)
    for tool, local, message in refusals:
        assert "outside the allowed roots" in message, (tool, local, message)
        assert str(root) in message and "--root" in message
    # Nothing reached the sandbox, nothing was written outside the root.
    assert after.structured_content["stdout"] == ""
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "secret.txt").read_text() == "SECRET-1234\n"
    assert sorted(pushed.structured_content["sent"]) == ["leak.txt", "ok.txt"]
    assert seen.structured_content["stdout"] == f"{outside / 'secret.txt'}\n"
    assert (root / "pulled" / "escape" / "pwn.txt").read_text() == "pwn\n"
    assert not (root / "pulled" / "escape").is_symlink()
    assert second.structured_content["local_path"] == str(tmp_path / "other" / "ok.txt")
    assert (tmp_path / "other" / "ok.txt").read_text() == "fine\n"
    assert "no sandbox is selected" in unselected


def test_claude_code_protocol_era_streams_progress_and_logs(
    asgi_server, world, shared_sandbox, tmp_path
):
    """Claude Code speaks the handshake era: a forwarded run_command's progress and log
    notifications reach it, and so does a local sync's byte progress."""
    (tmp_path / "blob.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    (tmp_path / "notes.tmp").write_text("left out\n")
    progress: list[str] = []
    logs: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message or "")

    async def on_log(message):
        data = message.data
        logs.append(data.get("msg", "") if isinstance(data, dict) else str(data))

    async def conversation():
        client = local_server(
            asgi_server,
            world.keys["alice"],
            [tmp_path],
            tmp_path,
            progress_handler=on_progress,
            log_handler=on_log,
            mode="legacy",
        )
        async with client:
            ran = await client.call_tool(
                "run_command",
                {"sandbox_id": shared_sandbox, "command": "echo one; sleep 1; echo two"},
            )
            args = {"sandbox_id": shared_sandbox, "local_path": ".", "remote_path": "era"}
            dry = await client.call_tool(
                "sync_local_to_remote", {**args, "dry_run": True, "excludes": ["*.tmp"]}
            )
            synced = await client.call_tool("sync_local_to_remote", {**args, "excludes": ["*.tmp"]})
            with pytest.raises(ToolError) as missing:  # the platform's own error, forwarded
                await client.call_tool(
                    "read_file", {"sandbox_id": shared_sandbox, "path": "no/such-file.txt"}
                )
            return client.initialize_result, ran, dry, synced, str(missing.value)

    initialized, ran, dry, synced, missing = run(conversation())
    assert dry.structured_content["dry_run"] is True
    assert dry.structured_content["sent"] == ["blob.bin"]  # notes.tmp excluded
    assert synced.structured_content["sent"] == ["blob.bin"]
    assert "no/such-file.txt" in missing, missing
    assert initialized is not None and "sync_local_to_remote" in initialized.instructions
    assert ran.structured_content["stdout"] == "one\ntwo\n"
    assert any("one" in message for message in progress), progress
    assert any("one" in line for line in logs), logs
    assert synced.structured_content["bytes"] == 3 * 1024 * 1024
    total = f"{3 * 1024 * 1024} of {3 * 1024 * 1024} bytes"
    assert any(message.endswith(total) for message in progress), progress


def test_a_refused_key_or_an_unreachable_platform_stops_the_server_at_start(
    asgi_server, world, tmp_path
):
    def start(server: str, key: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *SERVER, "--root", str(tmp_path)],
            env=server_env(server, key, tmp_path),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    revoked = start(asgi_server, world.keys["revoked"])
    assert revoked.returncode == 1 and revoked.stdout == ""
    assert "refused the API key" in revoked.stderr
    unreachable = start(f"http://127.0.0.1:{free_port()}", world.keys["alice"])
    assert unreachable.returncode == 1
    assert "cannot connect" in unreachable.stderr
    missing = start(asgi_server, "")
    assert missing.returncode == 2 and "SANDHUB_API_KEY not set" in missing.stderr
