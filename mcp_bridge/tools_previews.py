"""Tools that run a web app in a sandbox and hand out its address: deploy_app,
get_preview_url, stop_app (services.deploy_app / get_preview_url / stop_app).

The address is the platform's own (the preview proxy), built from the URL this request came
to; over stdio, where there is none, it is a path on the platform's web server.
"""

from __future__ import annotations

from typing import Annotated

from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity
from mcp_bridge.args import Command, Cwd, Env, FileIn, RequiredSandboxId, SandboxId
from mcp_bridge.runtime import call, call_long
from mcp_bridge.tools_files import to_uploads
from sandboxes import services
from sandboxes.contract import results
from sandboxes.contract.shapes import Shape, render
from sandboxes.policy.validation import WORKSPACE

STARTS = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
# Opening a preview changes what is reachable, and hands out a token: not read-only.
OPENS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
)
STOPS = ToolAnnotations(
    readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False
)
URL = (
    "open it in a browser: signed in as a team member, or by anyone who has this URL (its "
    "token) until expires_at"
)

Port = Annotated[
    int,
    Field(description="The TCP port the app listens on inside the sandbox.", ge=1, le=65535),
]
DeployFiles = Annotated[
    list[FileIn] | None,
    Field(
        description=f"Files to write into {WORKSPACE} before starting (as upload_files takes "
        "them); omit when the app is in the sandbox already.",
        max_length=1000,
    ),
]
WaitSeconds = Annotated[
    float,
    Field(
        description="How long to wait for the port to answer before giving up.",
        ge=1,
        le=services.MAX_WAIT_SECONDS,
    ),
]
ExpiresSeconds = Annotated[
    int | None,
    Field(
        description=f"How long the URL's token stays valid, in seconds; omit for "
        f"{services.DEFAULT_TOKEN_SECONDS} (viewers and read-only keys: at most, and by "
        f"default, {services.VIEWER_TOKEN_SECONDS}).",
        ge=60,
        le=services.MAX_TOKEN_SECONDS,
    ),
]
Public = Annotated[
    bool | None,
    Field(
        description="true: anyone with the address may open it without a token (team owners "
        "and admins, if the team allows public previews); false: no longer; omit: unchanged."
    ),
]


class DeployedApp(
    Shape,
    source=results.DeployedApp,
    fields="url sandbox_id port preview_id task_id link_id expires_at",
    rename={"task_id": "command_id"},
    describe={
        "task_id": "the app's background command: check_background shows its output, "
        "stop_app (or cancel_background) stops it"
    },
):
    url: str = Field(description=URL)


class PreviewUrl(
    Shape,
    source=results.PreviewLink,
    fields="url sandbox_id port preview_id public link_id expires_at",
):
    url: str = Field(description=URL)


class StoppedApp(
    Shape,
    source=results.PreviewInfo,
    fields="sandbox_id port preview_id task_id stopped_at",
    rename={"preview_id": "id", "task_id": "command_id"},
    describe={"task_id": "the background command that served it (cancelled), if any"},
):
    pass


def _url(sandbox_id: str, port: int, token: str | None) -> str:
    return services.preview_url(identity.request_base_url() or "/", sandbox_id, port, token)


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=STARTS)
    async def deploy_app(
        command: Command,
        port: Port,
        sandbox_id: SandboxId = None,
        files: DeployFiles = None,
        env: Env = None,
        cwd: Cwd = WORKSPACE,
        wait_seconds: WaitSeconds = services.DEFAULT_WAIT_SECONDS,
    ) -> DeployedApp:
        """Run a web app in a sandbox and get a URL to open it: writes `files` (optional),
        starts `command` in the background (it must serve on `port` in the foreground, e.g.
        'python3 -m http.server 8000'; no '&' or nohup), waits until the port answers, and
        returns the URL (through the platform, so it works without network in the sandbox).
        If the app exits or the port stays silent, it is stopped and the error shows the end
        of its log. Deploying again on the same port replaces the app."""
        uploads = to_uploads(files) if files else []

        def body() -> DeployedApp:
            caller = identity.caller()
            target = caller.sandbox(sandbox_id)
            if uploads:
                services.upload_files(caller.principal, target, uploads)
            app = services.deploy_app(
                caller.principal,
                target,
                command=command,
                port=port,
                env=env,
                cwd=cwd,
                wait_seconds=wait_seconds,
            )
            return render(DeployedApp, app, url=_url(app.sandbox_id, app.port, app.token))

        return await call_long(body)

    @mcp.tool(annotations=OPENS)
    async def get_preview_url(
        port: Port,
        sandbox_id: SandboxId = None,
        expires_seconds: ExpiresSeconds = None,
        public: Public = None,
    ) -> PreviewUrl:
        """Get a URL that opens a port of a sandbox in a browser, through the platform: for
        an app started any way (start_background, run_command) or by deploy_app. The URL
        carries a token valid for expires_seconds; team members signed in need none. The
        app is not checked: if nothing listens, the page says so."""

        def body() -> PreviewUrl:
            caller = identity.caller()
            link = services.get_preview_url(
                caller.principal,
                caller.sandbox(sandbox_id),
                port,
                expires_seconds=expires_seconds,
                public=public,
            )
            return render(PreviewUrl, link, url=_url(link.sandbox_id, link.port, link.token))

        return await call(body)

    @mcp.tool(annotations=STOPS)
    async def stop_app(port: Port, sandbox_id: RequiredSandboxId) -> StoppedApp:
        """Stop a preview: its URL stops working at once (every token of it), and the app
        deploy_app started on that port is cancelled. sandbox_id is required: this tool
        never acts on the selected sandbox."""

        def body() -> StoppedApp:
            caller = identity.caller()
            stopped = services.stop_app(caller.principal, sandbox_id, port)
            return StoppedApp.model_validate(stopped)

        return await call(body)
