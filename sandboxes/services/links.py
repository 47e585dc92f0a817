"""File links: a URL that downloads one file of a sandbox without a session.

A link is a row (sandboxes.models.AccessLink, its rules in access_links.py) and a random
token in the URL, `links/<token>/` under the platform's address. It expires
SANDHUB_FILE_LINK_SECONDS after it was made (the expiry is stored: changing the setting
changes new links only), works only while its sandbox runs and its creator is still a member
who may write, dies with his membership and with the sandbox, and can be revoked on its own.

Making one needs write access: a link hands the file to whoever holds the URL, which is more
than a viewer may do. Every use is audited once, as an anonymous web request filed under the
sandbox's team, with the link's id and its creator in the details.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote

from django.conf import settings
from django.utils import timezone

from sandboxes.contract.errors import InvalidInput, NotFound
from sandboxes.contract.links import FileLink
from sandboxes.contract.results import FileStream
from sandboxes.models import LinkKind
from sandboxes.policy import validation
from sandboxes.policy.access import WRITE
from sandboxes.services import access_links
from sandboxes.services.common import backend_errors, backend_of, running_sandbox
from sandboxes.services.files import open_file_stream
from tenants.auditing import AUDIT_READ, audited, change, current
from tenants.models import Role
from tenants.principal import Principal

INVALID = "this file link is invalid or has expired; ask for a new one"
NAME_MAX = 255  # bytes of one name in a path (Linux): a longer one names no file
FILE_LINK_PATH = "links/"  # under the platform's address: sandboxes/web/sandbox_urls.py

# The download itself is open_file_stream's body, unwrapped from its audit decorator: a use
# of a link is one audit row (this module's), not two, and the file is read exactly as a
# signed-in download reads it.
_stream_file: Callable[..., FileStream] = inspect.unwrap(open_file_stream)


@dataclass(frozen=True)
class LinkedFile:
    """A link's file, open: its path and its content as chunks (close() when done)."""

    link_id: str
    sandbox_id: str
    path: str
    stream: FileStream


def file_link_url(base_url: str, token: str) -> str:
    """Where a file link downloads: `base_url` is the platform's own address as the caller
    reached it (scheme, host, port, and a trailing path when mounted under one)."""
    prefix = base_url if base_url.endswith("/") else base_url + "/"
    return f"{prefix}{FILE_LINK_PATH}{quote(token, safe='')}/"


@audited("files.link.create", "sandbox")
def create_file_link(principal: Principal, sandbox_id: str, path: str) -> FileLink:
    """A link to one regular file of the sandbox, valid SANDHUB_FILE_LINK_SECONDS."""
    current().target("sandbox", sandbox_id)
    full = validation.path(path)
    if any(len(name.encode()) > NAME_MAX for name in full.split("/")):
        raise InvalidInput(f"no file has a name longer than {NAME_MAX} bytes: {full[:100]}…")
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "share file links")
    with backend_errors(sandbox, f"look at {full}", missing=full):
        entries = backend_of(sandbox).list_dir(sandbox.backend_state, full)
    # A file's listing is its one entry, named by its own path; a folder lists its children.
    if len(entries) != 1 or entries[0].path != full or entries[0].kind != "file":
        raise InvalidInput(f"{full} is not a regular file; a link downloads one file")
    expires_at = timezone.now() + timedelta(seconds=settings.SANDHUB_FILE_LINK_SECONDS)
    with change():  # the row and its audit row together
        link, token = access_links.mint(
            principal, sandbox, LinkKind.FILE, expires_at, Role.MEMBER, path=full
        )
        current().details.update(
            {"link_id": link.public_id, "path": full, "expires_at": expires_at.isoformat()}
        )
    return FileLink(
        token=token,
        link_id=link.public_id,
        sandbox_id=sandbox.public_id,
        path=full,
        expires_at=expires_at,
    )


@audited("files.link.open", "sandbox", kind=AUDIT_READ)
def open_file_link(principal: Principal, token: str) -> LinkedFile:
    """The file a link names, opened for download by whoever holds the link.

    `principal` is whoever presents it (anonymous on the web); the file is read with the
    link's creator's rights. An expired, revoked or unknown link is NotFound, whatever the
    reason (access_links.usable).
    """
    link = access_links.file_link(token)
    if link is None:
        raise NotFound(INVALID)
    sandbox, creator = link.sandbox, link.membership
    current().target("sandbox", sandbox.public_id)
    current().team = sandbox.team  # filed under the sandbox's team: its audit log shows every use
    current().details.update(
        {
            "link_id": link.public_id,
            "path": link.path,
            "created_by": creator.user.get_username(),
        }
    )
    if not access_links.usable(link):
        raise NotFound(INVALID)
    as_creator = Principal(
        user=creator.user,
        team=sandbox.team,
        channel=principal.channel,
        source_address=principal.source_address,
        role=creator.role,
    )
    stream = _stream_file(as_creator, sandbox.public_id, link.path)
    access_links.mark_used(link)
    return LinkedFile(
        link_id=link.public_id, sandbox_id=sandbox.public_id, path=link.path, stream=stream
    )
