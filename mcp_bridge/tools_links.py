"""Tools for the links that open a part of a sandbox without a login: get_file_link (the same
expiring, audited download link the sandbox page's "Copy link" makes), list_links and
revoke_link (file links and preview tokens alike; services.create_file_link / list_links /
revoke_link).

A link's URL is the platform's own, built from the URL this request came to; over stdio,
where there is none, it is a path on the platform's web server.
"""

from __future__ import annotations

from typing import Annotated

from fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mcp_bridge import identity
from mcp_bridge.args import Path, SandboxId
from mcp_bridge.runtime import call
from sandboxes import services
from sandboxes.contract import links
from sandboxes.contract.shapes import Shape, render

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
# A link hands a file to whoever has the URL: not read-only, though nothing is destroyed.
SHARES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
REVOKES = ToolAnnotations(
    readOnlyHint=False, destructiveHint=True, idempotentHint=True, openWorldHint=False
)

LinkId = Annotated[
    str,
    Field(
        description="The link's id, like lnk_k3j9x0a2b4c6 (list_links shows them; "
        "get_file_link returns its own as link_id).",
        min_length=1,
        max_length=40,
    ),
]


class FileLink(Shape, source=links.FileLink, fields="url link_id sandbox_id path expires_at"):
    url: str = Field(
        description="downloads the file with no login, for anyone who has it, until "
        "expires_at (or until revoked); every download is audited"
    )


class Link(Shape, source=links.LinkInfo):
    pass


class LinkList(BaseModel):
    links: list[Link] = Field(description="newest first")


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=SHARES)
    async def get_file_link(path: Path, sandbox_id: SandboxId = None) -> FileLink:
        """Get a URL that downloads one file of a sandbox with no login, to hand to a person
        (e.g. a report or a build artifact): it expires after the platform's link lifetime,
        stops working when the sandbox is deleted or when you leave the team, can be revoked
        with revoke_link, and every download is audited. Needs write access."""

        def body() -> FileLink:
            caller = identity.caller()
            made = services.create_file_link(caller.principal, caller.sandbox(sandbox_id), path)
            base = identity.request_base_url() or "/"
            return render(FileLink, made, url=services.file_link_url(base, made.token))

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def list_links(sandbox_id: SandboxId = None) -> LinkList:
        """List a sandbox's working links: file links (get_file_link, the page's "Copy
        link") and preview tokens (get_preview_url, deploy_app), with who made each, when it
        expires and when it was last used. Their URLs are not kept, so not shown."""

        def body() -> LinkList:
            caller = identity.caller()
            found = services.list_links(caller.principal, caller.sandbox(sandbox_id))
            return LinkList(links=[Link.model_validate(link) for link in found])

        return await call(body)

    @mcp.tool(annotations=REVOKES)
    async def revoke_link(link_id: LinkId, sandbox_id: SandboxId = None) -> Link:
        """Revoke one file link or preview token of a sandbox: its URL stops working at
        once, the sandbox's other links keep working. Its maker, or an owner or admin of the
        team, may."""

        def body() -> Link:
            caller = identity.caller()
            revoked = services.revoke_link(caller.principal, caller.sandbox(sandbox_id), link_id)
            return Link.model_validate(revoked)

        return await call(body)
