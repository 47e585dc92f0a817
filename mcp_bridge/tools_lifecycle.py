"""Tools that keep a sandbox between working sessions: pause_sandbox (frozen, memory kept),
stop_sandbox (processes ended, files kept) and resume_sandbox (services.pause_sandbox /
stop_sandbox / resume_sandbox). Any other tool on a paused or stopped sandbox resumes it
first, and its result says how long that took (resumed_seconds): resume_sandbox is for
having it ready before it is needed.

Pause and stop need sandbox_id explicitly, as delete_sandbox does: a tool that stops never
acts on the session's selection, which might not be the sandbox meant.
"""

from __future__ import annotations

from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mcp_bridge import identity
from mcp_bridge.args import RequiredSandboxId, SandboxId
from mcp_bridge.runtime import call, call_long
from mcp_bridge.schemas import Sandbox, sandbox
from sandboxes import services
from sandboxes.contract import lifecycle

# A pause or stop ends nothing for good (a resume brings the sandbox back, files and, after a
# pause, memory too), but a stop ends its processes: destructive for what ran there.
PAUSES = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
)
STOPS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False
)
RESUMES = PAUSES

_FIELDS = lifecycle.LifecycleChange.model_fields


class SandboxChange(BaseModel):
    sandbox: Sandbox
    previous_status: str = Field(description=_FIELDS["previous_status"].description)
    changed: bool = Field(description=_FIELDS["changed"].description)
    seconds: float | None = Field(description=_FIELDS["seconds"].description)
    background_ended: list[int] = Field(description=_FIELDS["background_ended"].description)


def shown(change: lifecycle.LifecycleChange, selected: str) -> SandboxChange:
    return SandboxChange(
        sandbox=sandbox(change.sandbox, selected),
        previous_status=change.previous_status,
        changed=change.changed,
        seconds=change.seconds,
        background_ended=change.background_ended,
    )


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=PAUSES)
    async def pause_sandbox(sandbox_id: RequiredSandboxId) -> SandboxChange:
        """Pause a sandbox between working sessions: every process freezes where it is and
        keeps its memory, and it stops using CPU. Any later call on it (run_command,
        read_file, ...) resumes it in a moment; resume_sandbox does it ahead of time.
        Refused while a foreground command runs (wait for it or cancel it); background
        commands freeze with it (their max_runtime_seconds still counts: one past it is
        killed as the sandbox resumes). Paused sandboxes count against the team's paused
        quota (and memory). sandbox_id is required: this tool never acts on the selected
        sandbox."""

        def body() -> SandboxChange:
            caller = identity.caller()
            return shown(services.pause_sandbox(caller.principal, sandbox_id), caller.selected())

        return await call(body)

    @mcp.tool(annotations=STOPS)
    async def stop_sandbox(sandbox_id: RequiredSandboxId) -> SandboxChange:
        """Stop a sandbox for a long break: its processes end (background commands too,
        recorded cancelled), its memory is freed, and only its files in /workspace are kept
        (/tmp and the home directory are memory: emptied). Any later call on it starts it again
        (processes afresh: start your servers again). Refused while a foreground command
        runs. Stopped sandboxes count against the team's stopped quota. sandbox_id is
        required: this tool never acts on the selected sandbox."""

        def body() -> SandboxChange:
            caller = identity.caller()
            return shown(services.stop_sandbox(caller.principal, sandbox_id), caller.selected())

        return await call_long(body)

    @mcp.tool(annotations=RESUMES)
    async def resume_sandbox(sandbox_id: SandboxId = None) -> SandboxChange:
        """Resume a paused sandbox (where it was, memory kept) or start a stopped one
        again (files kept, processes afresh); a running one is left as it is. Needs room
        among the team's running sandboxes. Not needed before other tools (they resume it
        themselves), only to have it ready ahead of time. A deleted sandbox cannot be
        resumed."""

        def body() -> SandboxChange:
            caller = identity.caller()
            target = caller.sandbox(sandbox_id)
            return shown(services.resume_sandbox(caller.principal, target), caller.selected())

        return await call_long(body)
