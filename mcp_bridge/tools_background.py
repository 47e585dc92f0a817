"""Tools for long-running commands: start one detached, follow it, cancel it.

The command runs in the sandbox on its own (it survives this call, the web process and the
worker); a django-q2 task supervises it and records its end. These tools only call
services.start_background / check_background / cancel_background.
"""

from __future__ import annotations

from typing import Annotated

from django.conf import settings
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity
from mcp_bridge.args import Command, Cwd, Env, SandboxId
from mcp_bridge.runtime import call
from mcp_bridge.schemas import BackgroundStarted, BackgroundStatus
from sandboxes import services
from sandboxes.contract.errors import NotFound
from sandboxes.policy.validation import WORKSPACE

STARTS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
LOOKS = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
KILLS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False
)
DEFAULT_TAIL_LINES = 50
TAIL_KIB = services.BACKGROUND_TAIL_BYTES // 1024

START_DESCRIPTION = (
    "Start a long-running shell command (bash -c) detached in a sandbox and return at once "
    "with its task_id: for servers, builds, training, or anything that may outlast a "
    "run_command timeout. It keeps running after this call; follow it with check_background "
    "(running or not, exit code, last lines of output, elapsed time) and stop it with "
    "cancel_background. Its stdout and stderr go to a log file in the sandbox. At most "
    f"{services.MAX_BACKGROUND_PER_SANDBOX} run at once per sandbox."
)

TaskId = Annotated[
    int,
    Field(
        description="The task id start_background returned (the command's id in the history).",
        ge=1,
        le=2**63 - 1,
    ),
]
TaskSandboxId = Annotated[
    str | None,
    Field(
        description="The sandbox the task was started in. May be omitted only in an MCP "
        "session whose selected sandbox it is.",
        max_length=40,
    ),
]
CancelSandboxId = Annotated[
    str,
    Field(
        description="The sandbox the task was started in. Always required: this tool never "
        "acts on the selected sandbox.",
        min_length=1,
        max_length=40,
    ),
]
MaxRuntime = Annotated[
    float | None,
    Field(
        description="Seconds after which the command is killed inside the sandbox and ends "
        f"as timed_out (default and maximum {settings.SANDHUB_MAX_TIMEOUT_SECONDS}).",
        gt=0,
        le=settings.SANDHUB_MAX_TIMEOUT_SECONDS,
    ),
]
TailLines = Annotated[
    int,
    Field(
        description="How many of the log's last lines to return (0: none; at most the "
        f"last {TAIL_KIB} KiB while it runs).",
        ge=0,
        le=services.MAX_TAIL_LINES,
    ),
]


def _not_found_hint(exc: NotFound, sandbox_id: str | None, target: str) -> ToolError:
    """A task looked for in the selected sandbox may live in another one: say so."""
    message = exc.message
    if sandbox_id is None and message.startswith("background command"):
        message += (
            f" (no sandbox_id was given, so the selected sandbox {target} was searched); "
            "pass the sandbox_id the task was started in"
        )
    return ToolError(message)


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=STARTS, description=START_DESCRIPTION)
    async def start_background(
        command: Command,
        sandbox_id: SandboxId = None,
        cwd: Cwd = WORKSPACE,
        env: Env = None,
        max_runtime_seconds: MaxRuntime = None,
    ) -> BackgroundStarted:
        def body() -> BackgroundStarted:
            caller = identity.caller()
            result = services.start_background(
                caller.principal,
                caller.sandbox(sandbox_id),
                command,
                cwd=cwd,
                env=env,
                max_runtime_seconds=max_runtime_seconds,
            )
            return BackgroundStarted.model_validate(result)

        return await call(body)

    @mcp.tool(annotations=LOOKS)
    async def check_background(
        task_id: TaskId,
        sandbox_id: TaskSandboxId = None,
        tail_lines: TailLines = DEFAULT_TAIL_LINES,
    ) -> BackgroundStatus:
        """Check a command started with start_background: whether it still runs, its status
        and exit code once it ended, the last tail_lines lines of its output and the seconds
        elapsed. Returns at once (it never waits for the command); call it again later to
        follow progress. The whole log is at log_path (read_file)."""

        def body() -> BackgroundStatus:
            caller = identity.caller()
            target = caller.sandbox(sandbox_id)
            try:
                check = services.check_background(
                    caller.principal, target, task_id, tail_lines=tail_lines
                )
            except NotFound as exc:
                raise _not_found_hint(exc, sandbox_id, target) from exc
            return BackgroundStatus.model_validate(check)

        return await call(body)

    @mcp.tool(annotations=KILLS)
    async def cancel_background(task_id: TaskId, sandbox_id: CancelSandboxId) -> BackgroundStatus:
        """Cancel a command started with start_background: every process it started gets
        SIGTERM, then SIGKILL 2 s later, and it ends as cancelled. Returns its final state
        with the last lines of output. A command that already ended is left as it ended
        (its status says how). sandbox_id is required: this tool never acts on the
        selected sandbox."""

        def body() -> BackgroundStatus:
            caller = identity.caller()
            check = services.cancel_background(caller.principal, sandbox_id, task_id)
            return BackgroundStatus.model_validate(check)

        return await call(body)
