"""Read-only MCP resources: the team's sandboxes, one sandbox's status, its recent commands."""

from __future__ import annotations

import json
from typing import Any

from fastmcp import FastMCP

from mcp_bridge import identity
from mcp_bridge.runtime import read
from mcp_bridge.schemas import CommandLog, sandbox
from sandboxes import services
from sandboxes.contract.shapes import render

LOG_COMMANDS = 20
TAIL_CHARS = 2000


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def register(mcp: FastMCP) -> None:
    @mcp.resource(
        "sandbox://list",
        name="sandboxes",
        description="Your team's sandboxes with their status (and whether this MCP "
        "session selected it), as JSON.",
        mime_type="application/json",
    )
    async def sandbox_list() -> str:
        def body() -> str:
            caller = identity.caller()
            selected = caller.selected()
            infos = services.list_sandboxes(caller.principal)
            return _json([sandbox(i, selected).model_dump(mode="json") for i in infos])

        return await read(body)

    @mcp.resource(
        "sandbox://{sandbox_id}/status",
        name="sandbox-status",
        description="One sandbox's status (running, paused with paused_at, stopped with "
        "stopped_at, ...), image, host, limits and expiry, as JSON. Reading it never "
        "resumes a paused sandbox.",
        mime_type="application/json",
    )
    async def sandbox_status(sandbox_id: str) -> str:
        def body() -> str:
            caller = identity.caller()
            info = services.get_sandbox(caller.principal, sandbox_id)
            return _json(sandbox(info, caller.selected()).model_dump(mode="json"))

        return await read(body)

    @mcp.resource(
        "sandbox://{sandbox_id}/logs",
        name="sandbox-logs",
        description=f"The sandbox's last {LOG_COMMANDS} commands, newest first, with exit "
        "codes and the tails of their output, as JSON.",
        mime_type="application/json",
    )
    async def sandbox_logs(sandbox_id: str) -> str:
        def body() -> str:
            caller = identity.caller()
            commands = services.list_commands(caller.principal, sandbox_id, limit=LOG_COMMANDS)
            # Python values (datetimes shown by str()), as this resource has always shown them.
            return _json(
                [
                    render(
                        CommandLog,
                        c,
                        command=c.command[:500],
                        stdout_tail=c.stdout[-TAIL_CHARS:],
                        stderr_tail=c.stderr[-TAIL_CHARS:],
                    ).model_dump()
                    for c in commands
                ]
            )

        return await read(body)
