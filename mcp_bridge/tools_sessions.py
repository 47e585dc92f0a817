"""Tools for shell sessions: run_command(session=...) runs in a long-lived shell of that name,
keeping cwd, variables and shell state between calls; list_sessions shows a sandbox's
sessions and close_session ends one (services.list_sessions / close_session). Also the
`session` and `stdin` arguments run_command takes."""

from __future__ import annotations

from typing import Annotated

from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mcp_bridge import identity
from mcp_bridge.args import SandboxId
from mcp_bridge.runtime import call
from sandboxes import services
from sandboxes.contract import terminals
from sandboxes.contract.shapes import Shape

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
ENDS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False
)

SessionName = Annotated[
    str,
    Field(
        description="The session's name: 1 to 40 lowercase letters, digits and '-' (e.g. 'main').",
        min_length=1,
        max_length=40,
    ),
]
Session = Annotated[
    str | None,
    Field(
        description="Run in the long-lived shell of this name (started in /workspace on first "
        "use): cd, export, functions and shell options carry over to the next command with "
        "the same session; cwd is then the session's own. Omit for a fresh shell each time. "
        "1 to 40 lowercase letters, digits and '-'.",
        max_length=40,
    ),
]
Stdin = Annotated[
    str | None,
    Field(
        description=f"Text given to the command's standard input (at most "
        f"{services.MAX_STDIN_BYTES} bytes); omit for none.",
    ),
]


class SessionInfo(Shape, source=terminals.SessionResult):
    pass


class SessionList(BaseModel):
    sessions: list[SessionInfo] = Field(description="by name")


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=READ_ONLY)
    async def list_sessions(sandbox_id: SandboxId = None) -> SessionList:
        """List a sandbox's shell sessions (run_command with `session` starts one): each
        keeps its cwd and variables until closed, until the sandbox stops, or until unused
        for the team's idle timeout."""

        def body() -> SessionList:
            caller = identity.caller()
            found = services.list_sessions(caller.principal, caller.sandbox(sandbox_id))
            return SessionList(sessions=[SessionInfo.model_validate(s) for s in found])

        return await call(body)

    @mcp.tool(annotations=ENDS)
    async def close_session(name: SessionName, sandbox_id: SandboxId = None) -> SessionInfo:
        """End a shell session: its shell and whatever it started are killed. The next
        run_command with its name starts a new session in /workspace."""

        def body() -> SessionInfo:
            caller = identity.caller()
            closed = services.close_session(caller.principal, caller.sandbox(sandbox_id), name)
            return SessionInfo.model_validate(closed)

        return await call(body)
