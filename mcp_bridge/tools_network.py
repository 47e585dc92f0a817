"""The network of a sandbox over MCP: the arguments create_sandbox takes for it (a mode and an
allow-list) and get_network_log, the connections the platform's egress proxy refused
(services.network_log). Read-only: any team role may call it."""

from __future__ import annotations

from typing import Annotated, Literal

from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity
from mcp_bridge.args import SandboxId
from mcp_bridge.runtime import call
from sandboxes import services
from sandboxes.contract import egress_results as egress
from sandboxes.contract.shapes import Shape, render

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

NETWORK_MODES = (
    "The sandbox's network, within your team's policy: "
    '"off" (no network at all; the default), '
    '"allowlist" (only the names of your team\'s allow-list, or the narrower `allow`, '
    "through the platform's egress proxy; DNS answers only those names), "
    '"public" (the internet through the proxy; private, loopback, link-local and the '
    "platform's own addresses stay refused). true means the most your team allows "
    '("public" or "allowlist"), false means "off". Refused connections are counted: see '
    "get_network_log."
)
Network = Annotated[
    bool | Literal["off", "allowlist", "public"] | None,
    Field(description=NETWORK_MODES),
]
Allow = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=260)]] | None,
    Field(
        description="Allow-list mode only: a narrower list for this sandbox, each entry "
        "within your team's allow-list (omit it for the team's whole list); entries are "
        '"name[:ports]", e.g. "pypi.org", "*.pythonhosted.org:443", "github.com:22,443" '
        '(ports default to 80 and 443; "*.x.y" is any name under x.y).',
        max_length=100,
    ),
]


class NetworkLog(Shape, source=egress.NetworkLogInfo):
    pass


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=READ_ONLY)
    async def get_network_log(sandbox_id: SandboxId = None) -> NetworkLog:
        """The sandbox's network mode, its allow-list, and the connections the platform
        refused it (destination name:port, reason, how many times, first and last seen), the
        most refused first. A destination your work needs that is refused here: ask a team
        owner or admin to add it to the team's allow-list, then create a new sandbox."""

        def body() -> NetworkLog:
            caller = identity.caller()
            log = services.network_log(caller.principal, caller.sandbox(sandbox_id))
            return render(NetworkLog, log)

        return await call(body)
