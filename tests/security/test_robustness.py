"""Inputs a hostile tenant sent to see what breaks (issue 8, point 8): 100k nested JSON
brackets, `"timeout": true`, and what the host list tells a viewer about other teams.

Through the live web process (uvicorn serving platform_site.asgi on loopback, as a client
sees it) with real keys; sandboxes on the in-memory backend, since none of this needs a
container.
"""

from __future__ import annotations

import httpx2 as httpx
import pytest
from fastmcp import Client

from hosts.backends import reset_backends
from hosts.models import Host
from sandboxes import services
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import Channel
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.live import run

API = "/api/v1"
NESTED = b"[" * 100_000 + b"]" * 100_000
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def fake_engine(settings, world):
    """The world's host on the in-memory backend (the live server reads the same settings)."""
    settings.SANDHUB_BACKENDS = {"docker": "tests.fakes.FakeBackend"}
    reset_backends()
    FakeBackend.sandboxes, FakeBackend.fail_provision = {}, None
    yield
    for sandbox in Sandbox.objects.exclude(status="deleted"):
        services.delete_sandbox(Principal.system(), sandbox.public_id)
    reset_backends()


@pytest.fixture
def sandbox_id(fake_engine, world) -> str:
    return services.create_sandbox(world.principal()).id


def rest(world, key_name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {world.keys[key_name]}"}


def mcp(server: str, key: str) -> Client:
    return Client(f"{server}/mcp/", auth=key)


# --- 100k nested brackets --------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/sandboxes/",
        "/sandboxes/SB/commands/",
        "/sandboxes/SB/background/",
        "/sandboxes/SB/run-tests/",
        "/run-once/",
    ],
)
def test_deeply_nested_json_to_rest_is_a_clean_400(asgi_server, world, sandbox_id, path):
    before = CommandExecution.objects.count(), Sandbox.objects.count()
    response = httpx.post(
        f"{asgi_server}{API}{path.replace('SB', sandbox_id)}",
        content=NESTED,
        headers={**rest(world, "alice"), "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 400, response.text[:300]
    assert response.headers["content-type"].startswith("application/json")
    assert "nested too deeply" in response.json()["detail"]
    assert (CommandExecution.objects.count(), Sandbox.objects.count()) == before


def test_deeply_nested_json_to_mcp_is_a_clean_jsonrpc_error(asgi_server, world):
    response = httpx.post(
        f"{asgi_server}/mcp/",
        content=NESTED,
        headers={**MCP_HEADERS, "Authorization": f"Bearer {world.keys['alice']}"},
        timeout=30,
    )
    assert 400 <= response.status_code < 500, response.text[:300]
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] in (-32700, -32600)

    # The endpoint still answers properly afterwards.
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return await client.call_tool("list_sandboxes", {})

    assert run(conversation()).structured_content["sandboxes"] == []


# --- booleans are no numbers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/sandboxes/SB/commands/", {"command": "echo hi", "timeout": True}),
        ("/sandboxes/SB/commands/", {"command": "echo hi", "output_cap": True}),
        ("/sandboxes/SB/run-tests/", {"command": "true", "timeout": True}),
        ("/sandboxes/SB/background/", {"command": "sleep 1", "max_runtime_seconds": True}),
        ("/run-once/", {"command": "true", "timeout": False}),
        ("/sandboxes/", {"cpus": True}),
    ],
)
def test_rest_refuses_a_boolean_for_a_number(asgi_server, world, sandbox_id, path, body):
    before = CommandExecution.objects.count(), Sandbox.objects.count()
    response = httpx.post(
        f"{asgi_server}{API}{path.replace('SB', sandbox_id)}",
        json=body,
        headers=rest(world, "alice"),
    )
    assert response.status_code == 400, response.text
    field = next(name for name, value in body.items() if isinstance(value, bool))
    assert response.json()["fields"][field] == "A number is required, not true or false."
    assert (CommandExecution.objects.count(), Sandbox.objects.count()) == before


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("run_command", {"command": "echo hi", "timeout": True}, "timeout"),
        ("run_python", {"code": "print(1)", "timeout": False}, "timeout"),
        ("start_background", {"command": "sleep 1", "max_runtime_seconds": True}, "max_runtime"),
        ("read_file", {"path": "x", "offset": True}, "offset"),
        ("create_sandbox", {"lifetime_minutes": True}, "lifetime_minutes"),
    ],
)
def test_mcp_refuses_a_boolean_for_a_number(asgi_server, world, sandbox_id, tool, arguments, field):
    before = CommandExecution.objects.count(), Sandbox.objects.count()
    if tool != "create_sandbox":
        arguments = {**arguments, "sandbox_id": sandbox_id}

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return await client.call_tool(tool, arguments, raise_on_error=False)

    result = run(conversation())
    assert result.is_error
    text = result.content[0].text
    assert text.startswith(field) and ": expected a" in text, text
    assert (CommandExecution.objects.count(), Sandbox.objects.count()) == before


# --- what the host list shows a viewer -------------------------------------------------------


def test_a_viewer_sees_only_its_own_teams_running_count_per_host(asgi_server, world, fake_engine):
    for _ in range(2):
        services.create_sandbox(Principal(user=world.bob, team=world.team_b))
    services.create_sandbox(world.principal())
    host = Host.objects.get()
    assert host.sandboxes.live().count() == 3

    as_viewer = Principal(user=world.victor, team=world.team_a, channel=Channel.WEB)
    assert [h.sandboxes_running for h in services.list_hosts(as_viewer)] == [1]
    as_bob = Principal(user=world.bob, team=world.team_b, channel=Channel.WEB)
    assert [h.sandboxes_running for h in services.list_hosts(as_bob)] == [2]
    assert [h.sandboxes_running for h in services.list_hosts(Principal.system())] == [3]

    listed = httpx.get(f"{asgi_server}{API}/hosts/", headers=rest(world, "victor")).json()
    assert [h["sandboxes_running"] for h in listed["results"]] == [1]

    async def conversation():
        async with mcp(asgi_server, world.keys["bob"]) as client:
            return await client.call_tool("list_hosts", {})

    hosts = run(conversation()).structured_content["hosts"]
    assert [h["sandboxes_running"] for h in hosts] == [2]
