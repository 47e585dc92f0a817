"""Tools for hosts and the sandbox lifecycle, and the MCP session's selected sandbox."""

from __future__ import annotations

from typing import Annotated

from django.conf import settings
from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity
from mcp_bridge.args import Env, RequiredSandboxId, SandboxId
from mcp_bridge.runtime import call
from mcp_bridge.schemas import ActiveSandbox, HostList, Sandbox, SandboxList, sandbox
from mcp_bridge.schemas import Host as HostOut
from mcp_bridge.tools_network import Allow, Network
from sandboxes import services
from sandboxes.services import selection

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
CREATES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
DESTROYS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)
SELECT_DESCRIPTION = (
    "Select a sandbox for this MCP session: later tools in the session may then omit "
    "sandbox_id (never delete_sandbox, stop_app and cancel_background, which always need it). "
    "The selection is this session's alone (other agents, even with the same API key, have "
    "their own); it ends with the session, or after "
    f"{settings.SANDHUB_MCP_SESSION_HOURS} hours unused. Clients without a session (the "
    "2026-07-28 protocol has none) cannot select: they get an error saying so, and pass "
    "sandbox_id to every tool instead."
)


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
        network: Network = None,
        allow: Allow = None,
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
                description="Select it in this MCP session, so later calls in the session "
                "may omit sandbox_id (no effect without a session)."
            ),
        ] = True,
        snapshot_id: Annotated[
            str | None,
            Field(
                description="Start from this snapshot's files (snapshot_sandbox, "
                "list_snapshots), with its image and limits unless given.",
                max_length=40,
            ),
        ] = None,
        request_id: Annotated[
            str | None,
            Field(
                description="Your own id for this request (a UUID, say): a retry with the "
                "same id and arguments returns the sandbox the first try made, instead of "
                "a second one.",
                max_length=100,
            ),
        ] = None,
    ) -> Sandbox:
        """Create a sandbox (an isolated Linux container with python3, bash and git; files
        live in /workspace) on the idlest host, wait until it runs, and return it. Team
        quotas apply (running sandboxes, cpus, memory, disk, lifetime); delete it when done.
        Keep its id: pass it as sandbox_id to the other tools (in an MCP session it is also
        selected, and `selected` says so)."""

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
                allow=allow,
                gpus=gpus,
                snapshot=snapshot_id,
                request_id=request_id,
            )
            if select and selection.remember_created(
                caller.principal, caller.key.pk, caller.session, info.id
            ):
                return sandbox(info, info.id)
            return sandbox(info, caller.selected())

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def list_sandboxes() -> SandboxList:
        """List your team's sandboxes (not deleted ones), newest first, and which one is
        selected in this MCP session (none without a session)."""

        def body() -> SandboxList:
            caller = identity.caller()
            selected = caller.selected()
            infos = services.list_sandboxes(caller.principal)
            return SandboxList(
                sandboxes=[sandbox(info, selected) for info in infos],
                selected=selected or None,
            )

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def get_sandbox(sandbox_id: SandboxId = None) -> Sandbox:
        """Show one sandbox: status, image, host, limits, last activity and expiry, and its
        network (`egress`: the mode, the allow-list in force and the refused connections)."""

        def body() -> Sandbox:
            caller = identity.caller()
            info = services.get_sandbox(caller.principal, caller.sandbox(sandbox_id))
            return sandbox(info, caller.selected())

        return await call(body)

    @mcp.tool(annotations=DESTROYS)
    async def delete_sandbox(sandbox_id: RequiredSandboxId) -> Sandbox:
        """Delete a sandbox and every file in it (its command history is kept). sandbox_id
        is required: this tool never acts on the selected sandbox. If it was this session's
        selected sandbox, nothing is selected afterwards."""

        def body() -> Sandbox:
            caller = identity.caller()
            info = services.delete_sandbox(caller.principal, sandbox_id)
            selection.forget_deleted(caller.principal, caller.key.pk, caller.session, info.id)
            return sandbox(info)

        return await call(body)

    @mcp.tool(
        annotations=ToolAnnotations(readOnlyHint=False, idempotentHint=True),
        description=SELECT_DESCRIPTION,
    )
    async def select_sandbox(
        sandbox_id: Annotated[
            str, Field(description="Sandbox id, like sb_k3j9x0a2b4c6.", max_length=40)
        ],
    ) -> ActiveSandbox:

        def body() -> ActiveSandbox:
            caller = identity.caller()
            info = selection.select_sandbox(
                caller.principal, caller.key.pk, caller.session, sandbox_id
            )
            return ActiveSandbox(sandbox=sandbox(info, info.id) if info else None)

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def get_active_sandbox() -> ActiveSandbox:
        """Show the sandbox selected in this MCP session, or null when none is (or it was
        deleted, or the client has no session)."""

        def body() -> ActiveSandbox:
            caller = identity.caller()
            info = selection.get_active_sandbox(caller.principal, caller.key.pk, caller.session)
            return ActiveSandbox(sandbox=sandbox(info, info.id) if info else None)

        return await call(body)
