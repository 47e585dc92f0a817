"""File links: a signed, expiring URL token that downloads one file without a session.

The token is the signed (django.core.signing.TimestampSigner, a salt of its own) description
of the link: sandbox, path, the creator's user and team, and a random link id. No table:

- it expires SANDHUB_FILE_LINK_SECONDS after it was made (read when it is used, so lowering
  the setting shortens links already handed out);
- it names the sandbox, and a deleted sandbox is never found again (its id is never reused):
  deleting the sandbox revokes its links;
- it acts with its creator's rights as they are when it is used: a creator who left the team
  (or was deactivated) takes his links with him.

Minting a link needs write access: a link hands the file to whoever holds the URL, which is
more than a viewer may do. Every use is audited once, as an anonymous web request filed under
the sandbox's team, with the link id and its creator in the details.
"""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.utils import timezone

from sandboxes.contract.errors import InvalidInput, NotFound
from sandboxes.contract.results import FileStream, Result
from sandboxes.policy import validation
from sandboxes.policy.access import WRITE
from sandboxes.services.common import backend_errors, backend_of, running_sandbox
from sandboxes.services.files import open_file_stream
from tenants.auditing import AUDIT_READ, audited, current
from tenants.models import Team
from tenants.principal import Principal

SALT = "sandhub.file-link"
INVALID = "this file link is invalid or has expired; ask for a new one"

# The download itself is open_file_stream's body, unwrapped from its audit decorator: a use
# of a link is one audit row (this module's), not two, and the file is read exactly as a
# signed-in download reads it.
_stream_file: Callable[..., FileStream] = inspect.unwrap(open_file_stream)


class FileLink(Result):
    token: str
    link_id: str
    sandbox_id: str
    path: str
    expires_at: datetime


@dataclass(frozen=True)
class LinkedFile:
    """A link's file, open: its path and its content as chunks (close() when done)."""

    link_id: str
    sandbox_id: str
    path: str
    stream: FileStream


def _signer() -> signing.TimestampSigner:
    return signing.TimestampSigner(salt=SALT)


@audited("files.link.create", "sandbox")
def create_file_link(principal: Principal, sandbox_id: str, path: str) -> FileLink:
    """A link to one regular file of the sandbox, valid SANDHUB_FILE_LINK_SECONDS."""
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "share file links")
    with backend_errors(sandbox, f"look at {full}", missing=full):
        entries = backend_of(sandbox).list_dir(sandbox.backend_state, full)
    # A file's listing is its one entry, named by its own path; a folder lists its children.
    if len(entries) != 1 or entries[0].path != full or entries[0].kind != "file":
        raise InvalidInput(f"{full} is not a regular file; a link downloads one file")
    link_id = secrets.token_urlsafe(6)
    payload = {
        "s": sandbox.public_id,
        "p": full,
        "u": principal.user.pk if principal.user else None,
        "t": sandbox.team_id,
        "i": link_id,
    }
    token = _signer().sign_object(payload, compress=True)
    expires_at = timezone.now() + timedelta(seconds=settings.SANDHUB_FILE_LINK_SECONDS)
    current().details.update(
        {"link_id": link_id, "path": full, "expires_at": expires_at.isoformat()}
    )
    return FileLink(
        token=token,
        link_id=link_id,
        sandbox_id=sandbox.public_id,
        path=full,
        expires_at=expires_at,
    )


@audited("files.link.open", "sandbox", kind=AUDIT_READ)
def open_file_link(principal: Principal, token: str) -> LinkedFile:
    """The file a link names, opened for download by whoever holds the link.

    `principal` is whoever presents it (anonymous on the web); the file is read with the
    link's creator's rights. An expired, tampered or revoked link is NotFound.
    """
    payload = _decode(token)
    sandbox_id, path, link_id = payload["s"], payload["p"], payload["i"]
    current().target("sandbox", sandbox_id)
    current().details.update({"link_id": link_id, "path": path})
    team = Team.objects.filter(pk=payload["t"]).first()
    if team is None:
        raise NotFound(INVALID)
    current().team = team  # filed under the sandbox's team: its audit log shows every use
    creator = get_user_model().objects.filter(pk=payload["u"], is_active=True).first()
    if creator is None:
        raise NotFound(INVALID)
    current().details["created_by"] = creator.get_username()
    as_creator = Principal(
        user=creator,
        team=team,
        channel=principal.channel,
        source_address=principal.source_address,
    )
    # A deleted sandbox, or a creator no longer in the team: not found (in the body below),
    # like any other stale link.
    stream = _stream_file(as_creator, sandbox_id, path)
    return LinkedFile(link_id=link_id, sandbox_id=sandbox_id, path=path, stream=stream)


def _decode(token: Any) -> dict[str, Any]:
    if not isinstance(token, str) or not token or len(token) > 2000:
        raise NotFound(INVALID)
    try:
        payload = _signer().unsign_object(token, max_age=settings.SANDHUB_FILE_LINK_SECONDS)
    except (signing.BadSignature, ValueError):  # tampered, expired, or not a token at all
        raise NotFound(INVALID) from None
    if not isinstance(payload, dict) or not all(k in payload for k in "sptui"):
        raise NotFound(INVALID)
    return payload
