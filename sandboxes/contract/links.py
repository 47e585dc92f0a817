"""The results of file links and preview tokens (sandboxes/services/access_links.py): a link
just made, with its secret, and a link as lists show it, without (the secret is not kept)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from sandboxes.contract.results import Result

if TYPE_CHECKING:
    from sandboxes.models import AccessLink

LINK_ID = "the link's id, like lnk_k3j9x0a2b4c6: lists show it, revoke_link takes it"


class FileLink(Result):
    """A link that downloads one file of a sandbox without a session, until expires_at."""

    token: str = Field(description="the secret in the link's URL: shown this once, never kept")
    link_id: str = Field(description=LINK_ID)
    sandbox_id: str
    path: str
    expires_at: datetime


class LinkInfo(Result):
    """A file link or a preview token of a sandbox: what it opens, who made it, until when."""

    id: str = Field(description=LINK_ID)
    kind: Literal["file", "preview"] = Field(
        description="file: downloads one file; preview: opens the preview of a port"
    )
    sandbox_id: str
    path: str | None = Field(description="the file a file link downloads")
    port: int | None = Field(description="the port whose preview a preview token opens")
    created_by: str | None
    min_role: str = Field(
        description="the role its creator must still hold in the team for it to work"
    )
    created_at: datetime
    expires_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None = Field(description="null unless revoked")
    revoked_by: str | None

    @classmethod
    def from_model(cls, link: AccessLink) -> LinkInfo:
        is_file = link.kind == "file"
        return cls.read(
            link,
            id=link.public_id,
            sandbox_id=link.sandbox.public_id,
            path=link.path if is_file else None,
            port=None if is_file else link.port,
            created_by=link.created_by.get_username() if link.created_by else None,
            revoked_by=link.revoked_by.get_username() if link.revoked_by else None,
        )


__all__ = ["FileLink", "LinkInfo"]
