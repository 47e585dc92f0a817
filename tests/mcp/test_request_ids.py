"""create_sandbox's request_id over MCP (a real fastmcp.Client over HTTP) and REST: a retry
gets the first try's sandbox; another team's key with the same id gets a sandbox of its own;
the same id with other arguments is refused (409 over REST)."""

from __future__ import annotations

import pytest
from fastmcp.exceptions import ToolError

from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import Channel
from tenants.principal import Principal
from tests.api.helpers import API, client_for
from tests.live import mcp, run

pytestmark = pytest.mark.docker

REQUEST = "c0ffee00-1d2e-4f00-8a9b-0123456789ab"


def test_mcp_retries_get_one_sandbox_and_teams_their_own(asgi_server, world):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as alice:
            first = (await alice.call_tool("create_sandbox", {"request_id": REQUEST})).data
            again = (await alice.call_tool("create_sandbox", {"request_id": REQUEST})).data
            with pytest.raises(ToolError, match="already used for a sandbox with other"):
                await alice.call_tool("create_sandbox", {"request_id": REQUEST, "name": "x"})
        async with mcp(asgi_server, world.keys["bob"]) as bob:
            theirs = (await bob.call_tool("create_sandbox", {"request_id": REQUEST})).data
        return first, again, theirs

    first, again, theirs = run(conversation())
    try:
        assert again.id == first.id and again.status == "running"
        assert theirs.id != first.id
        assert Sandbox.objects.filter(request_id=REQUEST).count() == 2
    finally:
        services.delete_sandbox(world.principal(), first.id)
        bob = Principal(user=world.bob, team=world.team_b, channel=Channel.WEB)
        services.delete_sandbox(bob, theirs.id)


def test_rest_retries_get_one_sandbox_and_other_arguments_409(world):
    client = client_for(world, "alice")
    body = {"name": "rest retry", "request_id": "rest-" + REQUEST}
    first = client.post(f"{API}/sandboxes/", body, format="json")
    assert first.status_code == 201, first.content
    try:
        again = client.post(f"{API}/sandboxes/", body, format="json")
        assert again.status_code == 201 and again.json()["id"] == first.json()["id"]
        other = client.post(f"{API}/sandboxes/", {**body, "name": "other"}, format="json")
        assert other.status_code == 409 and "request_id" in other.json()["detail"]
        bad = client.post(f"{API}/sandboxes/", {"request_id": "no spaces"}, format="json")
        assert bad.status_code == 400
    finally:
        services.delete_sandbox(world.principal(), first.json()["id"])
