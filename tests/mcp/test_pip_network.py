"""install_packages in a sandbox without network (real Docker engine; MCP over streamable HTTP
with a real fastmcp.Client): refused at once with what to do instead, and nothing runs; when
pip fails on a network error anyway (here: an index on the sandbox's loopback where nothing
listens), a plain hint follows pip's output."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import Conflict
from sandboxes.models import CommandExecution
from tests.live import mcp, run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


@pytest.fixture(scope="module")
def offline_sandbox(world):
    principal = world.principal()
    info = services.create_sandbox(principal, network=False)
    yield info.id
    services.delete_sandbox(principal, info.id)


def test_the_service_refuses_with_what_to_do(world, offline_sandbox):
    before = CommandExecution.objects.filter(sandbox__public_id=offline_sandbox).count()
    with pytest.raises(Conflict) as refused:
        services.install_packages(world.principal(), offline_sandbox, ["six"])
    message = str(refused.value)
    assert "has no network" in message and "network on" in message
    assert "--no-index --find-links /workspace/wheels" in message
    assert CommandExecution.objects.filter(sandbox__public_id=offline_sandbox).count() == before


def test_a_network_error_from_pip_gets_a_hint(world, offline_sandbox):
    result = services.install_packages(
        world.principal(), offline_sandbox, ["six"], index_url="http://127.0.0.1:9/simple"
    )
    assert result.status == "failed", result
    hint = result.stderr[result.stderr.index("sandhub: pip could not reach") :]
    assert "nothing in the sandbox answers at http://127.0.0.1:9/simple" in hint
    assert "--no-index --find-links" in hint
    assert result.stderr_bytes == len(result.stderr.encode())


def test_mcp_says_why_pip_cannot_run(asgi_server, world, offline_sandbox):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return await client.call_tool(
                "install_packages",
                {"sandbox_id": offline_sandbox, "packages": ["six"]},
                raise_on_error=False,
            )

    result = run(conversation())
    assert result.is_error
    text = result.content[0].text
    assert "has no network" in text and "--no-index --find-links" in text, text
