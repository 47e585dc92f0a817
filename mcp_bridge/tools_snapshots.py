"""Tools for snapshots: snapshot_sandbox, list_snapshots, delete_snapshot and fork_sandbox
(services.snapshot_sandbox / list_snapshots / delete_snapshot / fork_sandbox); a sandbox
starts from a snapshot with create_sandbox(snapshot_id=...)."""

from __future__ import annotations

from typing import Annotated

from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mcp_bridge import identity
from mcp_bridge.args import RequiredSandboxId, SandboxId
from mcp_bridge.runtime import call
from mcp_bridge.schemas import Sandbox, sandbox
from sandboxes import services
from sandboxes.contract import snapshots
from sandboxes.contract.shapes import Shape

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
CREATES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
DESTROYS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)

SnapshotName = Annotated[
    str,
    Field(
        description="A name for people, unique among your team's snapshots.",
        min_length=1,
        max_length=100,
    ),
]
SnapshotId = Annotated[
    str,
    Field(
        description="Snapshot id, like snap_k3j9x0a2b4c6 (snapshot_sandbox and "
        "list_snapshots show it).",
        min_length=1,
        max_length=40,
    ),
]


class Snapshot(Shape, source=snapshots.SnapshotInfo, exclude=("team",)):
    pass


class SnapshotList(BaseModel):
    snapshots: list[Snapshot] = Field(description="newest first")


class Fork(BaseModel):
    snapshot: Snapshot | None = Field(
        description="the snapshot taken, when keep_snapshot (kept until deleted); else null"
    )
    sandbox: Sandbox = Field(description="the new sandbox, started from it")


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=CREATES)
    async def snapshot_sandbox(name: SnapshotName, sandbox_id: SandboxId = None) -> Snapshot:
        """Keep a sandbox's files (its /workspace, and on Docker its home, where
        `pip install --user` puts packages) as a snapshot under a name, to start new
        sandboxes from later (create_sandbox with snapshot_id) or to branch before a risky
        step. The sandbox runs on; a command running meanwhile is paused for the copy and
        then goes on. Memory and processes are not kept. Team quotas limit how many
        snapshots you keep and how much disk they take; delete_snapshot frees them."""

        def body() -> Snapshot:
            caller = identity.caller()
            made = services.snapshot_sandbox(caller.principal, caller.sandbox(sandbox_id), name)
            return Snapshot.model_validate(made)

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def list_snapshots() -> SnapshotList:
        """List your team's snapshots, newest first: name, the sandbox each was taken from,
        its size, and the image and limits a sandbox made from it gets."""

        def body() -> SnapshotList:
            found = services.list_snapshots(identity.caller().principal)
            return SnapshotList(snapshots=[Snapshot.model_validate(s) for s in found])

        return await call(body)

    @mcp.tool(annotations=DESTROYS)
    async def delete_snapshot(snapshot_id: SnapshotId) -> Snapshot:
        """Delete a snapshot and its files (sandboxes made from it keep theirs). snapshot_id
        is always required."""

        def body() -> Snapshot:
            gone = services.delete_snapshot(identity.caller().principal, snapshot_id)
            return Snapshot.model_validate(gone)

        return await call(body)

    @mcp.tool(annotations=CREATES)
    async def fork_sandbox(
        sandbox_id: RequiredSandboxId,
        name: Annotated[
            str | None, Field(description="A label for the new sandbox.", max_length=100)
        ] = None,
        keep_snapshot: Annotated[
            bool,
            Field(
                description="Also keep the snapshot the fork is made from (list_snapshots; "
                "counts against your team's snapshot quota), to start more sandboxes from."
            ),
        ] = False,
        snapshot_name: Annotated[
            str | None,
            Field(
                description="Name of the snapshot kept with keep_snapshot (default: fork of ...).",
                max_length=100,
            ),
        ] = None,
    ) -> Fork:
        """Branch a sandbox: a new sandbox with its files, image and limits (files copied
        with its processes frozen for the copy); both sandboxes run on independently.
        Returns the new sandbox: pass its id as sandbox_id to work in the branch. With
        keep_snapshot, the snapshot it was made from is kept too."""

        def body() -> Fork:
            caller = identity.caller()
            snap, made = services.fork_sandbox(
                caller.principal,
                sandbox_id,
                name=name,
                snapshot_name=snapshot_name or "",
                keep_snapshot=keep_snapshot,
            )
            kept = Snapshot.model_validate(snap) if snap is not None else None
            return Fork(snapshot=kept, sandbox=sandbox(made))

        return await call(body)
