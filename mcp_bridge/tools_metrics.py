"""get_sandbox_metrics: a sandbox's CPU, memory, disk and pids over time with its limits
(services.get_sandbox_metrics), for an agent that wants to know why a build is slow or how
close a process is to the memory limit. Read-only: any team role may call it."""

from __future__ import annotations

from typing import Annotated

from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity
from mcp_bridge.args import SandboxId
from mcp_bridge.runtime import call
from sandboxes import services
from sandboxes.contract import usage
from sandboxes.contract.shapes import Shape, render

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

Minutes = Annotated[
    int, Field(description="How far back, in minutes (1 to a day; default 60).", ge=1)
]
Live = Annotated[
    bool,
    Field(description="Take a sample now first (of a running sandbox), so `latest` is current."),
]


class SandboxMetrics(Shape, source=usage.SandboxMetrics):
    pass


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=READ_ONLY)
    async def get_sandbox_metrics(
        sandbox_id: SandboxId = None, minutes: Minutes = 60, live: Live = False
    ) -> SandboxMetrics:
        """A sandbox's usage: CPU % (of its CPU limit), memory (without reclaimable cache),
        disk used in /workspace and pids, sampled about every minute and kept a day, as
        series aligned on `at`, with the latest values and the sandbox's limits. Memory near
        its limit means the next allocation may be killed (exit 137)."""

        def body() -> SandboxMetrics:
            caller = identity.caller()
            metrics = services.get_sandbox_metrics(
                caller.principal, caller.sandbox(sandbox_id), minutes, live
            )
            return render(SandboxMetrics, metrics)

        return await call(body)
