"""A prompt asked for without a required argument: the error a real fastmcp.Client shows names
the argument and says what it is (it said "Error rendering prompt" and nothing more). A live
uvicorn serving platform_site.asgi."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from tests.live import mcp, run

pytestmark = [pytest.mark.docker]


def test_a_missing_required_argument_is_named_with_what_it_is(asgi_server, world):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            with pytest.raises(MCPError) as missing:
                await client.get_prompt("debug-in-sandbox", {"sandbox_id": "sb_x"})
            given = await client.get_prompt("debug-in-sandbox", {"problem": "ImportError: x"})
            return str(missing.value), given

    said, given = run(conversation())
    assert said == (
        "The prompt 'debug-in-sandbox' needs this argument: problem (The error or wrong "
        "behaviour seen)."
    )
    assert "ImportError: x" in given.messages[0].content.text
