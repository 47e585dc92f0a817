"""Who may do what over the MCP endpoint, and what bad input does: keys (missing, wrong,
expired, revoked, read-only, a viewer's, a removed member's), another team's sandboxes, an
audit row for every call, clear errors that change nothing, oversized requests. A live
uvicorn serving platform_site.asgi, a real fastmcp.Client, the real Docker engine."""

from __future__ import annotations

import socket

import httpx2 as httpx
import pytest

from sandboxes.models import CommandExecution, Sandbox
from tenants.models import ApiKey, AuditLog, Channel, Membership
from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    # Log notifications still reach clients on the older protocol; the SDK warns about them.
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]

# Every tool that changes something, with arguments that would otherwise be valid.
WRITE_CALLS = [
    ("create_sandbox", {}),
    ("delete_sandbox", {"sandbox_id": "SB"}),
    ("run_command", {"sandbox_id": "SB", "command": "touch /workspace/nope"}),
    ("run_python", {"sandbox_id": "SB", "code": "print(1)"}),
    ("install_packages", {"sandbox_id": "SB", "packages": ["six"]}),
    ("upload_files", {"sandbox_id": "SB", "files": [{"path": "nope.txt", "content": "x"}]}),
    ("write_file", {"sandbox_id": "SB", "path": "nope.txt", "content": "x"}),
    ("run_tests", {"sandbox_id": "SB"}),
    ("run_once", {"command": "true"}),
]


# Every tool that names a sandbox, for the cross-team checks.
SANDBOX_CALLS = WRITE_CALLS[1:-1] + [
    ("get_sandbox", {"sandbox_id": "SB"}),
    ("select_sandbox", {"sandbox_id": "SB"}),
    ("download_files", {"sandbox_id": "SB", "paths": ["/workspace"]}),
    ("list_files", {"sandbox_id": "SB"}),
    ("read_file", {"sandbox_id": "SB", "path": "/etc/hostname"}),
]


def counts() -> tuple[int, int]:
    return Sandbox.objects.count(), CommandExecution.objects.count()


def with_id(args: dict, sandbox_id: str) -> dict:
    return {k: (sandbox_id if v == "SB" else v) for k, v in args.items()}


@pytest.mark.parametrize("key_name", [None, "wrong", "expired", "revoked"])
def test_missing_wrong_expired_and_revoked_keys_get_401(asgi_server, world, key_name):
    headers = {"Accept": "application/json, text/event-stream"}
    if key_name == "wrong":
        headers["Authorization"] = "Bearer shk_aaaaaaaa_" + "x" * 43
    elif key_name:
        headers["Authorization"] = f"Bearer {world.keys[key_name]}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx.post(f"{asgi_server}/mcp/", json=body, headers=headers)
    assert response.status_code == 401
    assert "Bearer" in response.headers.get("www-authenticate", "")

    async def conversation():
        key = world.keys.get(key_name or "", "shk_aaaaaaaa_" + "y" * 43)
        async with mcp(asgi_server, key) as client:
            await client.list_tools()

    with pytest.raises(Exception):  # noqa: B017 - the client surfaces the 401 its own way
        run(conversation())


def test_another_teams_sandbox_is_not_found_by_every_tool(asgi_server, world, shared_sandbox):
    before = counts()

    async def conversation():
        errors = {}
        async with mcp(asgi_server, world.keys["bob"]) as client:
            for name, args in SANDBOX_CALLS:
                result = await client.call_tool(
                    name, with_id(args, shared_sandbox), raise_on_error=False
                )
                errors[name] = result.content[0].text if result.is_error else "no error"
            for uri in (f"sandbox://{shared_sandbox}/status", f"sandbox://{shared_sandbox}/logs"):
                try:
                    await client.read_resource(uri)
                    errors[uri] = "no error"
                except Exception as exc:
                    errors[uri] = str(exc)
        return errors

    errors = run(conversation())
    for name, message in errors.items():
        assert message == f"sandbox {shared_sandbox} not found" or (
            f"sandbox {shared_sandbox} not found" in message
        ), (name, message)
    assert counts() == before
    assert Sandbox.objects.get(public_id=shared_sandbox).status == "running"


@pytest.mark.parametrize(
    "key_name, reason", [("alice_read", "no write scope"), ("victor", "a viewer may not")]
)
def test_read_scope_and_viewer_keys_are_refused_every_write_tool(
    asgi_server, world, shared_sandbox, key_name, reason
):
    before = counts()

    async def conversation():
        errors = {}
        async with mcp(asgi_server, world.keys[key_name]) as client:
            for name, args in WRITE_CALLS:
                result = await client.call_tool(
                    name, with_id(args, shared_sandbox), raise_on_error=False
                )
                errors[name] = result.content[0].text if result.is_error else "no error"
            # Reading is still fine.
            listed = await client.call_tool("list_sandboxes", {})
        return errors, listed

    errors, listed = run(conversation())
    for name, message in errors.items():
        assert reason in message.replace("this API key has no write scope", "no write scope"), (
            name,
            message,
        )
    assert shared_sandbox in {s["id"] for s in listed.structured_content["sandboxes"]}
    assert counts() == before


def test_removing_the_membership_disables_the_key_at_once(asgi_server, world):
    async def list_with_dave():
        async with mcp(asgi_server, world.keys["dave"]) as client:
            return await client.call_tool("list_hosts", {})

    hosts = run(list_with_dave())
    assert hosts.structured_content["hosts"][0]["name"] == "local"
    Membership.objects.filter(user=world.dave, team=world.team_a).delete()
    with pytest.raises(Exception):  # noqa: B017 - 401
        run(list_with_dave())
    response = httpx.post(
        f"{asgi_server}/mcp/",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={
            "Authorization": f"Bearer {world.keys['dave']}",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert response.status_code == 401


@pytest.mark.audit_views
def test_every_call_leaves_an_mcp_audit_row(asgi_server, world, shared_sandbox):
    calls = [
        ("list_hosts", {}),
        ("list_sandboxes", {}),
        ("select_sandbox", {"sandbox_id": shared_sandbox}),
        ("get_active_sandbox", {}),
        ("get_sandbox", {}),
        ("run_command", {"command": "true"}),
        ("run_python", {"code": "print('hi')"}),
        ("write_file", {"path": "audit.txt", "content": "x"}),
        ("read_file", {"path": "audit.txt"}),
        ("list_files", {}),
        ("download_files", {"paths": ["audit.txt"]}),
        ("get_sandbox", {"sandbox_id": "sb_doesnotexist"}),
    ]
    start = AuditLog.objects.order_by("-id").values_list("id", flat=True).first()

    async def conversation():
        # A handshake-era client: its session's selection serves the calls without an id.
        async with mcp(asgi_server, world.keys["alice"], mode="legacy") as client:
            for name, args in calls:
                await client.call_tool(name, args, raise_on_error=False)

    run(conversation())
    rows = list(AuditLog.objects.filter(id__gt=start).order_by("id"))
    assert len(rows) == len(calls)
    assert {row.channel for row in rows} == {Channel.MCP}
    assert {row.actor_id for row in rows} == {world.alice.pk}
    assert {row.source_address for row in rows} == {"127.0.0.1"}
    assert [row.action for row in rows][:6] == [
        "host.list",
        "sandbox.list",
        "sandbox.get",
        "sandbox.get",
        "sandbox.get",
        "command.run",
    ]
    assert rows[-1].outcome == "not_found"
    key = ApiKey.objects.get(pk=world.rows["alice"].pk)
    assert key.last_used_at is not None and key.last_used_address == "127.0.0.1"


def test_run_tests_and_run_once_leave_their_rows_only(asgi_server, world, shared_sandbox):
    start = AuditLog.objects.order_by("-id").values_list("id", flat=True).first()

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            await client.call_tool(
                "run_tests",
                {"sandbox_id": shared_sandbox, "command": "true", "junit_report": False},
            )
            await client.call_tool("run_once", {"command": "true"})

    run(conversation())
    rows = list(AuditLog.objects.filter(id__gt=start).order_by("id"))
    assert [(row.action, row.outcome) for row in rows] == [
        ("command.tests", "ok"),
        ("command.tests", "ok"),
        ("command.once", "ok"),
        ("command.once", "ok"),
    ]
    assert [r.details.get("continues") for r in rows] == [None, rows[0].pk, None, rows[2].pk]
    assert rows[0].target_id == shared_sandbox and rows[0].details["command"] == "true"


def test_bad_input_gives_clear_errors_and_creates_nothing(asgi_server, world, shared_sandbox):
    before = counts()
    cases = [
        (
            "run_command",
            {"sandbox_id": shared_sandbox, "command": "true", "sudo": True},
            "unexpected keyword argument",
        ),
        ("run_command", {"sandbox_id": shared_sandbox, "command": ["ls"]}, "expected a string"),
        (
            "run_command",
            {"sandbox_id": shared_sandbox, "command": "true", "timeout": "soon"},
            "expected a number",
        ),
        (
            "run_command",
            {"sandbox_id": shared_sandbox, "command": "true", "timeout": 10**6},
            "less than or equal",
        ),
        ("create_sandbox", {"memory_mb": 10}, "greater than or equal to 64"),
        ("create_sandbox", {"name": "x" * 500}, "at most 100 characters"),
        (
            "run_command",
            {"sandbox_id": shared_sandbox, "command": "x" * 100_001},
            "at most 100000 characters",
        ),
        (
            "upload_files",
            {"sandbox_id": shared_sandbox, "files": [{"path": "f", "content": ""}] * 1001},
            "at most 1000 items",
        ),
        (
            "upload_files",
            {
                "sandbox_id": shared_sandbox,
                "files": [{"path": "a", "content": "!!", "encoding": "base64"}],
            },
            "not base64",
        ),
        ("get_sandbox", {"sandbox_id": "../etc"}, "malformed sandbox id"),
        (
            "run_command",
            {"sandbox_id": "SB-1; rm -rf /", "command": "true"},
            "malformed sandbox id",
        ),
        (
            "write_file",
            {"sandbox_id": shared_sandbox, "path": "../../etc/x", "content": "x"},
            "must be inside /workspace",
        ),
        ("create_sandbox", {"memory_mb": 10**5}, "team quota"),
        ("create_sandbox", {"image": "nope"}, "unknown image 'nope'"),
    ]

    async def conversation():
        messages = []
        async with mcp(asgi_server, world.keys["alice"]) as client:
            for name, args, _ in cases:
                result = await client.call_tool(name, args, raise_on_error=False)
                messages.append(result.content[0].text if result.is_error else "no error")
        return messages

    for (name, _, expected), message in zip(cases, run(conversation()), strict=True):
        assert expected.lower() in message.lower(), (name, message)
    assert counts() == before


def test_oversized_requests_are_refused_before_they_are_read(asgi_server, world, shared_sandbox):
    """Over HTTP the MCP SDK caps a request body at 4 MiB (413), before parsing (the answer's
    text: test_refusal_texts.py)."""
    before = counts()
    host, port = asgi_server.removeprefix("http://").split(":")
    request = (
        f"POST /mcp/ HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n"
        f"Authorization: Bearer {world.keys['alice']}\r\n"
        f"Content-Length: {10**10}\r\n\r\n{{"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = sock.recv(65536).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413"), answer[:200]

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            await client.call_tool(
                "write_file",
                {"sandbox_id": shared_sandbox, "path": "big.txt", "content": "x" * (5 * 2**20)},
            )

    with pytest.raises(Exception, match="at most 4 MiB"):
        run(conversation())
    assert counts() == before
