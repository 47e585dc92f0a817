"""`sandhub mcp`: a local stdio MCP server for agents on this machine (Claude Code and others).

It forwards every platform tool, resource and prompt unchanged (a FastMCP proxy of
SANDHUB_URL/mcp/ acting with the API key; progress and log notifications of a forwarded call
reach the agent), and adds four tools the platform cannot offer because they touch this
machine's files: sync_local_to_remote, sync_remote_to_local, upload_local_path and
download_to_local_path. Those take local paths only inside the `--root` directories (default:
the current directory), so an agent given this server cannot read the laptop's other files.

The selected sandbox is this process's: it keeps one MCP session on the platform for its
whole life (mcp_platform.py), so two agents with one key, each with a `sandhub mcp` of its
own, never act in each other's selected sandbox.

stdout carries the protocol only; anything else goes to stderr.
"""

from __future__ import annotations

import asyncio
import posixpath
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastmcp import Client, Context
from fastmcp.exceptions import ToolError
from fastmcp.server import create_proxy
from fastmcp.server.providers.proxy import FastMCPProxy
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from sandhub import config, sync, transfer
from sandhub.api import ApiError, Platform
from sandhub.mcp_options import parse_args, set_forwarded_logging, wants_debug
from sandhub.mcp_platform import (
    check_platform,
    end_platform_session,
    open_platform_session,
    platform_transport,
)
from sandhub.roots import OutsideRoots, Roots
from sandhub.tarstream import TransferError

INSTRUCTIONS = """\
Sandhub runs code in isolated remote Linux sandboxes (files in /workspace). Every platform
tool is here (create_sandbox, run_command, run_tests, read_file, ...), plus tools that move
files between this machine and a sandbox: sync_local_to_remote / sync_remote_to_local
(incremental by size and mtime, .gitignore honoured, delete to remove extras, dry_run to
preview), upload_local_path and download_to_local_path. Local paths must lie inside the
allowed directories ({roots}); relative local paths start at {first}. sandbox_id may be
omitted to use the sandbox selected in this server (create_sandbox selects the new one;
select_sandbox another): the selection is this process's alone. delete_sandbox, stop_app and
cancel_background always need sandbox_id.
"""
WORKSPACE = "/workspace"
LISTED_PATHS = 200  # a result names at most this many sent or deleted paths (and counts all)
PROGRESS_EVERY = 0.25  # seconds between progress notifications of one transfer

LocalPath = Annotated[
    str,
    Field(
        description="Path on this machine, inside the allowed roots (relative paths start at "
        "the first root).",
        min_length=1,
        max_length=4096,
    ),
]
RemotePath = Annotated[
    str,
    Field(
        description=f"Path in the sandbox; relative paths start at {WORKSPACE}.",
        min_length=1,
        max_length=4096,
    ),
]
SandboxId = Annotated[
    str | None,
    Field(
        description="Sandbox id; omit to use the sandbox selected in this server "
        "(create_sandbox / select_sandbox).",
        max_length=40,
    ),
]
Excludes = Annotated[
    list[Annotated[str, Field(max_length=1000)]],
    Field(
        description="gitignore-style patterns to leave out, like ['*.log', 'build/'].",
        max_length=200,
    ),
]
Delete = Annotated[
    bool, Field(description="Also remove what the receiving directory has and the sender lacks.")
]
DryRun = Annotated[bool, Field(description="Only report what would be sent and deleted.")]

SYNCS = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True)
COPIES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=True)


class Synced(BaseModel):
    sandbox_id: str
    local_path: str = Field(description="the local directory, resolved")
    remote_path: str
    dry_run: bool
    sent: list[str] = Field(
        description=f"paths sent (directories end in '/'), first {LISTED_PATHS}"
    )
    sent_count: int
    deleted: list[str] = Field(description=f"extras removed, first {LISTED_PATHS}")
    deleted_count: int
    unchanged: int = Field(description="files and links already equal on both sides")
    bytes: int = Field(description="content bytes sent")


class Copied(BaseModel):
    sandbox_id: str
    local_path: str = Field(description="the local file or directory, resolved")
    remote_path: str = Field(description="where it is in the sandbox")


T = TypeVar("T")
Options = dict[str, Any]  # sync's keyword options: delete, excludes, dry_run


class McpProgress:
    """sync's TransferProgress, relayed as MCP progress notifications (bytes done of total).

    sync calls it from a worker thread, once per chunk; notifications are throttled and
    handed to the server's event loop without waiting for them, so the transfer never
    waits on the agent."""

    def __init__(self, ctx: Context, loop: asyncio.AbstractEventLoop) -> None:
        self.ctx, self.loop = ctx, loop
        self.label, self.total, self.done, self.last = "", 0, 0, 0.0
        self.pending: list[Any] = []

    def start(self, label: str, total_bytes: int) -> None:
        self.label, self.total, self.done, self.last = label, total_bytes, 0, 0.0
        self._send()

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        if time.monotonic() - self.last >= PROGRESS_EVERY:
            self._send()

    def finish(self) -> None:
        self._send()

    def _send(self) -> None:
        self.last = time.monotonic()
        message = f"{self.label}: {self.done} of {self.total} bytes"
        coroutine = self.ctx.report_progress(self.done, self.total or None, message)
        self.pending = [f for f in self.pending if not f.done()]
        self.pending.append(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    async def drain(self) -> None:
        """Wait for the notifications still on their way: none may follow the result."""
        await asyncio.gather(*(asyncio.wrap_future(f) for f in self.pending))


class LocalFiles:
    """The four local tools' work: roots checked first, then sync / transfer in a thread."""

    def __init__(self, url: str, key: str, roots: Roots, session: str | None = None) -> None:
        self.url, self.key, self.roots, self.session = url, key, roots, session

    async def sandbox(self, sandbox_id: str | None) -> str:
        """The given id, else the sandbox selected in this server's platform session."""
        if sandbox_id:
            return sandbox_id
        async with Client(platform_transport(self.url, self.key, self.session)) as client:
            answer = await client.call_tool("get_active_sandbox", {})
        selected = (answer.structured_content or {}).get("sandbox")
        if not selected:
            raise ToolError(
                "no sandbox is selected: pass sandbox_id, or create_sandbox / select_sandbox first"
            )
        return str(selected["id"])

    async def in_thread(self, ctx: Context, work: Callable[[Platform, McpProgress], T]) -> T:
        """Run blocking sync / transfer code in a thread with a Platform of its own and a
        progress relay; its errors become tool errors the agent can act on."""
        progress = McpProgress(ctx, asyncio.get_running_loop())

        def body() -> T:
            with Platform(self.url, self.key) as platform:
                return work(platform, progress)

        try:
            return await asyncio.to_thread(body)
        except (ApiError, TransferError) as exc:
            raise ToolError(str(exc)) from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise ToolError(f"{where}{exc.strerror or exc}") from None
        finally:
            await progress.drain()

    def local(self, path: str) -> Path:
        """The resolved local path, or a tool error when it is outside the roots."""
        try:
            return self.roots.check(path)
        except OutsideRoots as exc:
            raise ToolError(str(exc)) from None

    async def push(
        self, ctx: Context, local: str, sandbox_id: str | None, remote: str, options: Options
    ) -> Synced:
        directory = self.local(local)
        target, remote = await self.sandbox(sandbox_id), remote_path(remote)
        report = await self.in_thread(
            ctx,
            lambda platform, progress: sync.push(
                platform, directory, target, remote, progress=progress, **options
            ),
        )
        return synced(report, target, directory, remote, options["dry_run"])

    async def pull(
        self, ctx: Context, sandbox_id: str | None, remote: str, local: str, options: Options
    ) -> Synced:
        directory = self.local(local)
        target, remote = await self.sandbox(sandbox_id), remote_path(remote)
        report = await self.in_thread(
            ctx,
            lambda platform, progress: sync.pull(
                platform, target, remote, directory, progress=progress, **options
            ),
        )
        return synced(report, target, directory, remote, options["dry_run"])

    async def upload(self, ctx: Context, local: str, sandbox_id: str | None, remote: str) -> Copied:
        source = self.local(local)
        target, remote = await self.sandbox(sandbox_id), remote_path(remote)
        landed = await self.in_thread(
            ctx,
            lambda platform, progress: transfer.upload(
                platform, source, target, remote, progress=progress
            ),
        )
        return Copied(sandbox_id=target, local_path=str(source), remote_path=landed)

    async def download(
        self, ctx: Context, sandbox_id: str | None, remote: str, local: str
    ) -> Copied:
        destination = self.local(local)
        target, remote = await self.sandbox(sandbox_id), remote_path(remote)
        if destination.is_dir():
            # transfer.download puts it inside an existing directory under the remote name:
            # check that final place too (remote_path is normalised, so the name is no '..').
            self.local(str(destination / (posixpath.basename(remote) or "root")))
        landed = await self.in_thread(
            ctx,
            lambda platform, progress: transfer.download(
                platform, target, remote, destination, progress=progress
            ),
        )
        return Copied(sandbox_id=target, local_path=str(landed), remote_path=remote)


def remote_path(path: str) -> str:
    """Absolute and without '..' or '.', as the platform would resolve it, so the names sync
    and transfer derive from it are plain."""
    return posixpath.normpath(posixpath.join(WORKSPACE, path.strip()))


def synced(
    report: sync.SyncReport, sandbox_id: str, local: Path, remote: str, dry_run: bool
) -> Synced:
    return Synced(
        sandbox_id=sandbox_id,
        local_path=str(local),
        remote_path=remote,
        dry_run=dry_run,
        sent=report.sent[:LISTED_PATHS],
        sent_count=len(report.sent),
        deleted=report.deleted[:LISTED_PATHS],
        deleted_count=len(report.deleted),
        unchanged=report.unchanged,
        bytes=report.bytes,
    )


def build_server(url: str, key: str, roots: Roots, session: str | None = None) -> FastMCPProxy:
    """The proxy of the platform at `url` with the local file tools added, every platform
    request in the platform session `session` (open_platform_session)."""
    # A transport (not a Client) as the target: each forwarded request gets a fresh backend
    # client speaking the front connection's protocol era, and ProxyClient's handlers relay
    # the backend's progress and log notifications to the agent. Every one of those backend
    # clients presents the same Mcp-Session-Id, so the selection made through one holds
    # for the next (and is this process's alone).
    server = create_proxy(
        platform_transport(url, key, session),
        name="Sandhub (local)",
        instructions=INSTRUCTIONS.format(roots=roots.describe(), first=roots.paths[0]),
    )
    register_local_tools(server, LocalFiles(url, key, roots, session))
    return server


def register_local_tools(server: FastMCPProxy, files: LocalFiles) -> None:
    @server.tool(annotations=SYNCS)
    async def sync_local_to_remote(
        local_path: LocalPath,
        remote_path: RemotePath,
        ctx: Context,
        sandbox_id: SandboxId = None,
        delete: Delete = False,
        excludes: Excludes | None = None,
        dry_run: DryRun = False,
    ) -> Synced:
        """Make a sandbox directory hold what a local directory holds, sending only what
        differs in size, mtime or mode (modes and mtimes kept; .gitignore honoured). With
        delete, files in the sandbox directory that the local one lacks are removed."""
        options = {"delete": delete, "excludes": excludes or (), "dry_run": dry_run}
        return await files.push(ctx, local_path, sandbox_id, remote_path, options)

    @server.tool(annotations=SYNCS)
    async def sync_remote_to_local(
        remote_path: RemotePath,
        local_path: LocalPath,
        ctx: Context,
        sandbox_id: SandboxId = None,
        delete: Delete = False,
        excludes: Excludes | None = None,
        dry_run: DryRun = False,
    ) -> Synced:
        """Make a local directory (created if missing) hold what a sandbox directory holds,
        fetching only what differs (modes and mtimes kept; the sandbox's .gitignore
        honoured). With delete, local files the sandbox directory lacks are removed."""
        options = {"delete": delete, "excludes": excludes or (), "dry_run": dry_run}
        return await files.pull(ctx, sandbox_id, remote_path, local_path, options)

    @server.tool(annotations=COPIES)
    async def upload_local_path(
        local_path: LocalPath, remote_path: RemotePath, ctx: Context, sandbox_id: SandboxId = None
    ) -> Copied:
        """Copy a local file or whole directory into a sandbox, like cp -r: into remote_path
        under its own name when remote_path is an existing directory, else as remote_path."""
        return await files.upload(ctx, local_path, sandbox_id, remote_path)

    @server.tool(annotations=COPIES)
    async def download_to_local_path(
        remote_path: RemotePath, local_path: LocalPath, ctx: Context, sandbox_id: SandboxId = None
    ) -> Copied:
        """Copy a sandbox file or whole directory to this machine, like cp -r: into local_path
        under its own name when local_path is an existing directory, else as local_path."""
        return await files.download(ctx, sandbox_id, remote_path, local_path)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    set_forwarded_logging(wants_debug(args.verbose))
    try:
        roots = Roots(args.root or ["."])
        settings = config.load()
    except (OutsideRoots, config.ConfigError) as exc:
        print(f"sandhub mcp: {exc}", file=sys.stderr)
        return 2
    problem = check_platform(settings.url, settings.key)
    if problem:
        print(f"sandhub mcp: {settings.url}: {problem}", file=sys.stderr)
        return 1
    session = open_platform_session(settings.url, settings.key)
    if session is None:  # an older platform: its selection is the key's
        print("sandhub mcp: no MCP session: the selection is the key's", file=sys.stderr)
    print(f"sandhub mcp: {settings.url}, local roots: {roots.describe()}", file=sys.stderr)
    try:
        build_server(settings.url, settings.key, roots, session).run(
            transport="stdio", show_banner=False
        )
    finally:
        if session is not None:
            end_platform_session(settings.url, settings.key, session)
    return 0


if __name__ == "__main__":
    sys.exit(main())
