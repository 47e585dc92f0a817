"""Shell sessions and stdin over streamable HTTP (mcp_bridge/tools_sessions.py, run_command's
`session` and `stdin`) and over REST (sandboxes/api/terminals.py): cd and export carry over
in a session, a command without one starts fresh in /workspace, list_sessions and
close_session show and end them, stdin reaches `cat`, and too much stdin is refused with the
cap named. A live uvicorn serving platform_site.asgi, a real fastmcp.Client with a Bearer
key, the real Docker engine behind the services."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from sandboxes import services
from sandboxes.models import CommandExecution
from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


def text_of(result) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


def test_a_session_keeps_cd_and_export_and_no_session_is_fresh(asgi_server, world, shared_sandbox):
    box = {"sandbox_id": shared_sandbox}

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            call = client.call_tool
            await call("run_command", {**box, "command": "cd /tmp; export X=5", "session": "s1"})
            kept = await call("run_command", {**box, "command": "echo $X; pwd", "session": "s1"})
            fresh = await call("run_command", {**box, "command": "echo x$X; pwd"})
            listed = await call("list_sessions", box)
            closed = await call("close_session", {**box, "name": "s1"})
            again = await call("run_command", {**box, "command": "pwd", "session": "s1"})
            after = await call("list_sessions", box)
            return [r.structured_content for r in (kept, fresh, listed, closed, again, after)]

    kept, fresh, listed, closed, again, after = run(conversation())
    assert kept["stdout"] == "5\n/tmp\n" and kept["exit_code"] == 0
    assert fresh["stdout"] == "x\n/workspace\n"
    assert [s["name"] for s in listed["sessions"]] == ["s1"]
    assert closed["name"] == "s1"
    assert again["stdout"] == "/workspace\n", "a closed session starts anew"
    assert [s["name"] for s in after["sessions"]] == ["s1"]
    row = CommandExecution.objects.get(pk=kept["command_id"])
    assert (row.session, row.channel, row.command) == ("s1", "mcp", "echo $X; pwd")
    services.close_session(world.principal(), shared_sandbox, "s1")


def test_stdin_reaches_the_command_over_mcp_and_rest(asgi_server, world, shared_sandbox):
    box = {"sandbox_id": shared_sandbox}

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            echoed = await client.call_tool(
                "run_command", {**box, "command": "cat", "stdin": "from mcp\n"}
            )
            in_session = await client.call_tool(
                "run_command",
                {**box, "command": "cat | tr a-z A-Z", "stdin": "quiet\n", "session": "s2"},
            )
            too_much = await client.call_tool(
                "run_command",
                {**box, "command": "cat", "stdin": "x" * (services.MAX_STDIN_BYTES + 1)},
                raise_on_error=False,
            )
            return echoed.structured_content, in_session.structured_content, too_much

    echoed, in_session, too_much = run(conversation())
    assert echoed["stdout"] == "from mcp\n"
    assert in_session["stdout"] == "QUIET\n"
    assert too_much.is_error and "1048576 bytes" in text_of(too_much)

    headers = {"Authorization": f"Bearer {world.keys['alice']}"}
    url = f"{asgi_server}/api/v1/sandboxes/{shared_sandbox}/commands/"
    with httpx.Client(headers=headers, timeout=60) as client:
        answer = client.post(url, json={"command": "cat", "stdin": "from rest\n"})
        assert answer.status_code == 201, answer.text
        assert answer.json()["stdout"] == "from rest\n"
        session = client.post(
            url, json={"command": "cd /srv 2>/dev/null || cd /tmp; pwd", "session": "rest"}
        )
        kept = client.post(url, json={"command": "pwd", "session": "rest"})
        assert kept.json()["stdout"] == session.json()["stdout"] != "/workspace\n"
        listed = client.get(f"{asgi_server}/api/v1/sandboxes/{shared_sandbox}/sessions/")
        assert "rest" in {s["name"] for s in listed.json()["results"]}
        gone = client.delete(f"{asgi_server}/api/v1/sandboxes/{shared_sandbox}/sessions/rest/")
        assert gone.status_code == 200, gone.text
        bad = client.post(url, json={"command": "pwd", "session": "Not Valid"})
        assert bad.status_code == 400 and "session name" in bad.json()["detail"]
    services.close_session(world.principal(), shared_sandbox, "s2")


def test_terminals_over_rest(asgi_server, world, shared_sandbox):
    base = f"{asgi_server}/api/v1/sandboxes/{shared_sandbox}/terminals/"
    with httpx.Client(timeout=60) as client:
        alice = {"Authorization": f"Bearer {world.keys['alice']}"}
        opened = client.post(base, json={"cols": 100, "rows": 30}, headers=alice)
        assert opened.status_code == 201, opened.text
        terminal = opened.json()
        assert terminal["url"].endswith(f"/sandboxes/{shared_sandbox}/terminals/{terminal['id']}/")
        listed = client.get(base, headers=alice).json()["results"]
        assert terminal["id"] in {t["id"] for t in listed}
        viewer = {"Authorization": f"Bearer {world.keys['victor']}"}
        refused = client.post(base, json={}, headers=viewer)
        assert refused.status_code == 403 and "a viewer may not open terminals" in refused.text
        closed = client.delete(f"{base}{terminal['id']}/", headers=alice)
        assert closed.status_code == 200 and closed.json()["closed_at"] is not None
        assert terminal["id"] not in {
            t["id"] for t in client.get(base, headers=alice).json()["results"]
        }
