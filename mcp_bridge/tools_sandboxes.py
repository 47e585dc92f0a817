"""Tools for hosts and the sandbox lifecycle, and the per-key selected sandbox."""

from __future__ import annotations

from typing import Annotated

from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity
from mcp_bridge.args import Env, SandboxId
from mcp_bridge.runtime import call
from mcp_bridge.schemas import ActiveSandbox, HostList, Sandbox, SandboxList, sandbox
from mcp_bridge.schemas import Host as HostOut
from sandboxes import services
from sandboxes.services import selection

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
CREATES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
DESTROYS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=READ_ONLY)
    async def list_hosts() -> HostList:
        """List the hosts your team's sandboxes can run on, idlest first, with each host's
        idle score (1 = idle, 0 = saturated), load figures and how many of your team's
        sandboxes it runs."""

        def body() -> HostList:
            caller = identity.caller()
            return HostList(
                hosts=[HostOut.model_validate(h) for h in services.list_hosts(caller.principal)]
            )

        return await call(body)

    @mcp.tool(annotations=CREATES)
    async def create_sandbox(
        image: Annotated[
            str | None, Field(description="Image name; omit for the default.", max_length=100)
        ] = None,
        name: Annotated[
            str | None, Field(description="A label for people.", max_length=100)
        ] = None,
        cpus: Annotated[float | None, Field(description="CPU cores.", gt=0, le=64)] = None,
        memory_mb: Annotated[
            int | None, Field(description="Memory limit in MB.", ge=64, le=1024 * 1024)
        ] = None,
        disk_mb: Annotated[
            int | None,
            Field(description="Size of /workspace in MB (default: the team's limit).", ge=64),
        ] = None,
        lifetime_minutes: Annotated[
            int | None,
            Field(description="Deleted automatically after this long.", ge=1, le=525600),
        ] = None,
        env: Env = None,
        network: Annotated[
            bool | None, Field(description="Network access, if your team allows it.")
        ] = None,
        gpus: Annotated[
            int | None,
            Field(
                description="GPUs of its own (on the host whose GPUs are freest); its "
                "commands see them as CUDA_VISIBLE_DEVICES. See list_hosts for GPU use.",
                ge=0,
                le=16,
            ),
        ] = None,
        select: Annotated[
            bool,
            Field(
                description="Make it this key's selected sandbox (later calls may omit sandbox_id)."
            ),
        ] = True,
    ) -> Sandbox:
        """Create a sandbox (an isolated Linux container with python3, bash and git; files
        live in /workspace) on the idlest host, wait until it runs, and return it. Team
        quotas apply (running sandboxes, cpus, memory, disk, lifetime); delete it when done."""

        def body() -> Sandbox:
            caller = identity.caller()
            info = services.create_sandbox(
                caller.principal,
                image=image,
                name=name,
                cpus=cpus,
                memory_mb=memory_mb,
                disk_mb=disk_mb,
                env=env,
                lifetime_minutes=lifetime_minutes,
                network=network,
                gpus=gpus,
            )
            if not select:
                return sandbox(info, caller.key.selected_sandbox)
            selection.remember_created(caller.principal, caller.key.pk, info.id)
            return sandbox(info, info.id)

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def list_sandboxes() -> SandboxList:
        """List your team's sandboxes (not deleted ones), newest first, and which one is
        selected for this API key."""

        def body() -> SandboxList:
            caller = identity.caller()
            selected = caller.key.selected_sandbox
            infos = services.list_sandboxes(caller.principal)
            return SandboxList(
                sandboxes=[sandbox(info, selected) for info in infos],
                selected=selected or None,
            )

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def get_sandbox(sandbox_id: SandboxId = None) -> Sandbox:
        """Show one sandbox: status, image, host, limits, last activity and expiry."""

        def body() -> Sandbox:
            caller = identity.caller()
            info = services.get_sandbox(caller.principal, caller.sandbox(sandbox_id))
            return sandbox(info, caller.key.selected_sandbox)

        return await call(body)

    @mcp.tool(annotations=DESTROYS)
    async def delete_sandbox(sandbox_id: SandboxId = None) -> Sandbox:
        """Delete a sandbox and every file in it (its command history is kept). If it was the
        selected sandbox, nothing is selected afterwards."""

        def body() -> Sandbox:
            caller = identity.caller()
            target = caller.sandbox(sandbox_id)
            info = services.delete_sandbox(caller.principal, target)
            selection.forget_deleted(caller.principal, caller.key.pk, target)
            return sandbox(info)

        return await call(body)

    @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, idempotentHint=True))
    async def select_sandbox(
        sandbox_id: Annotated[
            str, Field(description="Sandbox id, like sb_k3j9x0a2b4c6.", max_length=40)
        ],
    ) -> ActiveSandbox:
        """Make a sandbox the default for this API key: later tools may then omit sandbox_id.
        The choice is stored on the server per key, so it lasts across connections."""

        def body() -> ActiveSandbox:
            caller = identity.caller()
            info = selection.select_sandbox(caller.principal, caller.key.pk, sandbox_id)
            return ActiveSandbox(sandbox=sandbox(info, info.id) if info else None)

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def get_active_sandbox() -> ActiveSandbox:
        """Show the sandbox selected for this API key, or null when none is (or it was deleted)."""

        def body() -> ActiveSandbox:
            caller = identity.caller()
            info = selection.get_active_sandbox(caller.principal, caller.key.pk)
            return ActiveSandbox(sandbox=sandbox(info, info.id) if info else None)

        return await call(body)
