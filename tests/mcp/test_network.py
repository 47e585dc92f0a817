"""The network over MCP (mcp_bridge/tools_network.py, tools_sandboxes.py): create_sandbox
with network "allowlist" and `allow`; get_sandbox's `egress` block; get_network_log (read-only,
viewers may call it, another team's sandbox is not found); a bad mode is a clear tool error
and creates nothing. A real fastmcp.Client over streamable HTTP with real keys, the sandboxes
on the in-memory backend (the proxy and the firewall are the Docker and SSH helpers' tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from hosts.backends import reset_backends
from sandboxes import services
from sandboxes.models import Sandbox
from tests.fakes import FakeBackend
from tests.live import in_thread, mcp, run
from tests.web.egress_helpers import allow_network, refusal

pytestmark = pytest.mark.filterwarnings("ignore:The logging capability is deprecated")


@pytest.fixture(scope="module")
def on_fake(world) -> Iterator[None]:
    """The module's sandboxes on the in-memory backend; team A may have network."""
    with override_settings(SANDHUB_BACKENDS={"docker": "tests.fakes.FakeBackend"}):
        reset_backends()
        FakeBackend.sandboxes = {}
        allow_network(world.team_a, allowlist=["pypi.org", "github.com:22,443"])
        yield
        reset_backends()


def call(server: str, key: str, tool: str, args: dict) -> tuple[bool, dict | None, str]:
    async def conversation():
        async with mcp(server, key) as client:
            answer = await client.call_tool(tool, args, raise_on_error=False)
            text = "\n".join(getattr(part, "text", "") for part in answer.content)
            return answer.is_error, answer.structured_content, text

    return run(conversation())


def test_create_in_allowlist_mode_and_read_its_network(asgi_server, world, on_fake) -> None:
    args = {"network": "allowlist", "allow": ["github.com:22,443"], "name": "net"}
    failed, made, text = call(asgi_server, world.keys["alice"], "create_sandbox", args)
    assert not failed, text
    assert made is not None and made["network_mode"] == "allowlist" and made["network"] is True
    sandbox_id = made["id"]
    run(in_thread(refusal, sandbox_id, "evil.example:443", "not in the allow-list", 5))

    failed, shown, text = call(
        asgi_server, world.keys["victor"], "get_sandbox", {"sandbox_id": sandbox_id}
    )
    assert not failed, text
    assert shown is not None and shown["egress"]["mode"] == "allowlist"
    assert shown["egress"]["allow"] == ["github.com:22,443"]
    assert shown["egress"]["refused"][0]["destination"] == "evil.example:443"

    failed, log, text = call(
        asgi_server, world.keys["alice_read"], "get_network_log", {"sandbox_id": sandbox_id}
    )
    assert not failed, text
    assert log is not None and log["mode"] == "allowlist"
    refused = log["refused"][0]
    assert (refused["destination"], refused["reason"], refused["count"]) == (
        "evil.example:443",
        "not in the allow-list",
        5,
    )


def test_another_teams_network_log_is_not_found(asgi_server, world, on_fake) -> None:
    ours = run(in_thread(services.create_sandbox, world.principal()))
    failed, _, text = call(
        asgi_server, world.keys["bob"], "get_network_log", {"sandbox_id": ours.id}
    )
    ghost = call(asgi_server, world.keys["bob"], "get_network_log", {"sandbox_id": "sb_0ghost0000"})
    assert failed and "not found" in text
    assert text.replace(ours.id, "sb_0ghost0000") == ghost[2]  # ids cannot be probed


@pytest.mark.parametrize("network", ["sideways", "ALLOWLIST", 3])
def test_a_bad_mode_is_a_tool_error_and_nothing_is_made(
    asgi_server, world, on_fake, network
) -> None:
    count = run(in_thread(Sandbox.objects.count))
    failed, _, text = call(asgi_server, world.keys["alice"], "create_sandbox", {"network": network})
    assert failed and "network" in text, text
    assert run(in_thread(Sandbox.objects.count)) == count


def test_a_bad_rule_is_a_tool_error_and_nothing_is_made(asgi_server, world, on_fake) -> None:
    count = run(in_thread(Sandbox.objects.count))
    args = {"network": "allowlist", "allow": ["not a name!"]}
    failed, _, text = call(asgi_server, world.keys["alice"], "create_sandbox", args)
    assert failed and "not a name!" in text, text
    assert run(in_thread(Sandbox.objects.count)) == count


def test_the_tools_say_what_the_modes_mean(asgi_server, world) -> None:
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return {tool.name: tool for tool in await client.list_tools()}

    tools = run(conversation())
    log = tools["get_network_log"]
    assert log.annotations is not None and log.annotations.read_only_hint is True
    network = tools["create_sandbox"].input_schema["properties"]["network"]
    text = str(network)
    for mode in ("off", "allowlist", "public"):
        assert f'"{mode}"' in network["description"] and mode in text
    assert "allow" in tools["create_sandbox"].input_schema["properties"]
