"""What the `sandhub` command and `sandhub mcp` tell a person or an agent when something is
wrong: exit codes as the README's table gives them (0 done, 1 refused or failed, 2 usage), and
no log line on stderr for each notification `sandhub mcp` forwards unless asked for. A live
platform (uvicorn serving platform_site.asgi, real Docker sandboxes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from tests.client.helpers import CLI, sandhub, server_env
from tests.live import run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.txt").write_text("a\n")
    return tmp_path / "proj"


def test_an_unknown_sandbox_name_is_a_refusal_not_a_usage_error(cli_env, project):
    """README: 1 refused or failed, 2 usage. A sandbox that does not exist is the platform's
    answer to a well-formed command line, whether it is named by id or by name."""
    for args in (
        ("sync", str(project), "no-such-box:proj"),
        ("sync", "no-such-box:proj", str(project)),
        ("run", "no-such-box", "--", "true"),
        ("cp", "no-such-box:x", str(project)),
        ("logs", "no-such-box"),
        ("jobs", "no-such-box"),
        ("sandboxes", "rm", "no-such-box"),
    ):
        result = sandhub(cli_env, *args)
        assert result.returncode == 1, (args, result.returncode, result.stderr)
        assert "no sandbox named 'no-such-box'" in result.stderr, (args, result.stderr)


def test_usage_errors_exit_2(cli_env, project, tmp_path):
    for args in (
        ("sync", str(project), str(tmp_path)),  # two local paths
        ("run", "no-such-box", "--"),  # nothing to run
        ("sandboxes", "frobnicate"),  # argparse's own refusal
    ):
        result = sandhub(cli_env, *args)
        assert result.returncode == 2, (args, result.returncode, result.stderr)


def test_a_missing_command_of_a_sandbox_exits_1(cli_env, shared_sandbox):
    result = sandhub(cli_env, "logs", shared_sandbox, "999999")
    assert result.returncode == 1, result.stderr


def _stdio_client(
    asgi_server: str, key: str, cwd: Path, stderr: Path, logs: list[str], **env: str
) -> Client:
    async def on_log(message) -> None:
        data = message.data
        logs.append(data.get("msg", "") if isinstance(data, dict) else str(data))

    transport = StdioTransport(
        command=sys.executable,
        args=CLI,  # `sandhub mcp`, as Claude Code starts it
        env=server_env(asgi_server, key, cwd) | env,
        cwd=str(cwd),
        keep_alive=False,
        log_file=stderr,
    )
    return Client(transport, timeout=120, mode="legacy", log_handler=on_log)


def _run_printing(client: Client, sandbox_id: str) -> None:
    async def conversation():
        async with client:
            result = await client.call_tool(
                "run_command",
                {
                    "sandbox_id": sandbox_id,
                    "command": "for i in 1 2 3; do echo line$i; sleep 0.5; done",
                },
            )
            assert result.structured_content["stdout"] == "line1\nline2\nline3\n"

    run(conversation())


def test_sandhub_mcp_forwards_log_notifications_without_writing_them_to_stderr(
    asgi_server, world, shared_sandbox, tmp_path
):
    quiet, verbose = tmp_path / "quiet.log", tmp_path / "verbose.log"
    quiet_logs: list[str] = []
    verbose_logs: list[str] = []
    key = world.keys["alice"]
    _run_printing(
        _stdio_client(asgi_server, key, tmp_path, verbose, verbose_logs, SANDHUB_DEBUG="1"),
        shared_sandbox,
    )
    _run_printing(_stdio_client(asgi_server, key, tmp_path, quiet, quiet_logs), shared_sandbox)
    # Both agents got the output as log notifications: there was something to write.
    assert any("line2" in text for text in quiet_logs), quiet_logs
    assert any("line2" in text for text in verbose_logs), verbose_logs
    said = quiet.read_text()
    assert "sandhub mcp:" in said  # its start line: the file is the server's stderr
    assert "DEBUG" not in said and "Sending" not in said and "line2" not in said, said
    assert "Warning" not in said, said
    # The switch brings them back, for whoever debugs the forwarding.
    assert "line2" in verbose.read_text(), verbose.read_text()
