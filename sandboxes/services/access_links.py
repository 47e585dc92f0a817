"""File links and preview tokens: one kind of row (sandboxes.models.AccessLink), one set of
rules, and the services that list and revoke them (file links: links.py; preview tokens:
previews.py makes them, previews_access.py checks them for the proxy).

A token is a random secret, `shl_` (file link) or `shp_` (preview token) and 32 random bytes
in URL-safe base64: it says nothing of who made it or what it opens. Only its SHA-256 is
kept, under a unique index, so finding a token's row is one indexed read (the proxy does it
on every request a token carries). 32 random bytes need no slow hash: nobody guesses them,
and the hash only keeps a copy of the database from opening anything.

A token works while (and every refusal is the same NotFound, so a token cannot be probed):
- it is neither revoked nor expired;
- its creator's membership exists: the row is deleted with it (a member removed and added
  back has a new membership, and makes new links), and the creator's user is active;
- the creator's role in the team now is at least the link's min_role;
- a file link's sandbox runs; a preview token's preview is open (the very preview it was
  made for: a port opened again is a new preview).

min_role is set when the link is made. File links need write to be made, and at use
(member or above). A preview token made by someone who may write (role and API key scope)
needs write at use and lives up to MAX_TOKEN_SECONDS; one made by a viewer, or with a
read-only key, lives at most VIEWER_TOKEN_SECONDS and needs only read: a viewer may look at
a preview with his session anyway, and a short token is how the host-mode "Open" carries that
to the preview's own host, where the session cookie does not go.

Any member of the team sees the sandbox's working links (list_links); the creator, or an
owner or admin of the team, may revoke one (revoke_link): a change, so it needs write, and
a viewer's own tokens end within minutes anyway.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from dbkit.prepared import PreparedRead
from sandboxes.contract.errors import InvalidInput, NotFound, PermissionDenied
from sandboxes.contract.links import LinkInfo
from sandboxes.models import SERVED_STATUSES, AccessLink, LinkKind, Preview, Sandbox
from sandboxes.policy import access
from sandboxes.policy.access import READ, WRITE
from tenants.auditing import AUDIT_VIEW, audited, current
from tenants.models import Membership, Role
from tenants.principal import Principal

TOKEN_PREFIX = {LinkKind.FILE: "shl_", LinkKind.PREVIEW: "shp_"}
TOKEN_BYTES = 32
MAX_TOKEN_CHARS = 100  # anything longer is no token of ours, and is not even hashed
DEFAULT_TOKEN_SECONDS = 3600  # a preview token's life when none is asked for
VIEWER_TOKEN_SECONDS = 600  # a viewer's (or a read-only key's) preview token, at most
# A preview token is checked on every proxied request: its last use is written at most once
# a minute. A file link's use is rare (and audited): written every time.
LAST_USED_INTERVAL = timedelta(seconds=60)
MAX_LISTED = 500  # newest first; a sandbox with more working links shows these
LINK_ID_RE = re.compile(r"^lnk_[a-z0-9]{12}$")
_ROLE_RANK: dict[str, int] = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- making a link ---------------------------------------------------------------------------


def may_write(principal: Principal) -> bool:
    """Whether the principal may write (its role and its key's scopes): who may make links
    that need write and last long."""
    try:
        access.require(principal, WRITE, "make links")
    except PermissionDenied:
        return False
    return True


def mint(
    principal: Principal,
    sandbox: Sandbox,
    kind: str,
    expires_at: datetime,
    min_role: str,
    *,
    path: str = "",
    preview: Preview | None = None,
) -> tuple[AccessLink, str]:
    """A new link of the sandbox acting for the principal's membership, and its token (given
    out this once: only its hash is kept)."""
    membership = _creator_membership(principal, sandbox, preview)
    token = TOKEN_PREFIX[LinkKind(kind)] + secrets.token_urlsafe(TOKEN_BYTES)
    link = AccessLink.objects.create(
        kind=kind,
        secret_hash=digest(token),
        sandbox=sandbox,
        membership=membership,
        created_by=membership.user,
        path=path,
        preview=preview,
        port=preview.port if preview is not None else None,
        min_role=min_role,
        expires_at=expires_at,
    )
    return link, token


def mint_preview_token(
    principal: Principal, sandbox: Sandbox, preview: Preview, seconds: int | None
) -> tuple[AccessLink, str]:
    """A new token of the preview, valid `seconds` (None: as long as the principal may have
    by default). One who may write gets what he asks for, and his token needs write; a
    viewer (or a read-only key) gets at most VIEWER_TOKEN_SECONDS, and his needs only read."""
    if may_write(principal):
        seconds, min_role = seconds or DEFAULT_TOKEN_SECONDS, Role.MEMBER
    elif seconds is not None and seconds > VIEWER_TOKEN_SECONDS:
        who = "a viewer" if access.role_of(principal) == Role.VIEWER else "a read-only API key"
        raise PermissionDenied(
            f"{who} may get preview links valid at most {VIEWER_TOKEN_SECONDS} s (10 minutes): "
            f"ask for expires_seconds of {VIEWER_TOKEN_SECONDS} or less"
        )
    else:
        seconds, min_role = seconds or VIEWER_TOKEN_SECONDS, Role.VIEWER
    expires_at = (timezone.now() + timedelta(seconds=seconds)).replace(microsecond=0)
    return mint(principal, sandbox, LinkKind.PREVIEW, expires_at, min_role, preview=preview)


def _creator_membership(
    principal: Principal, sandbox: Sandbox, preview: Preview | None
) -> Membership:
    """The membership a new link acts for: the principal's in the sandbox's team; for the
    system (no user), that of whoever opened the preview."""
    user_id = principal.user.pk if principal.user is not None else None
    if user_id is None and preview is not None:
        user_id = preview.created_by_id
    found = None
    if user_id is not None:
        rows = Membership.objects.select_related("user").filter(team_id=sandbox.team_id)
        found = rows.filter(user_id=user_id).order_by().first()
    if found is None:
        raise PermissionDenied(
            "a link acts for a member of the sandbox's team: only the team's members make links"
        )
    return found


# --- using one -------------------------------------------------------------------------------


def file_link(token: Any) -> AccessLink | None:
    """The row of a file link's token, with its sandbox, team, host and creator; None for a
    token that names nothing. Whether it still works: usable()."""
    rows = AccessLink.objects.select_related(
        "sandbox__team", "sandbox__host", "membership__user"
    ).filter(kind=LinkKind.FILE)
    return _find(rows, token, LinkKind.FILE)


# The proxy reads a preview token's row like this on every request that carries one:
# compiled once (dbkit/prepared.py).
_preview_token_row: PreparedRead[AccessLink] = PreparedRead(
    lambda preview_id, secret_hash: (
        AccessLink.objects.select_related("membership__user")
        .filter(kind=LinkKind.PREVIEW, preview_id=preview_id, secret_hash=secret_hash)
        .order_by()[:1]
    ),
    -1_734_028_197,  # within a 32-bit key: Django drops out-of-range lookups
    "\x00hash placeholder",
)


def preview_token(token: Any, preview: Preview) -> AccessLink | None:
    """The row of a token for exactly this (open) preview, with its creator; None for any
    other token. One indexed read: the proxy calls this on every request with a token."""
    if not _well_formed(token, LinkKind.PREVIEW):
        return None
    return _preview_token_row.first(preview.pk, digest(token))


def _find(rows: Any, token: Any, kind: LinkKind) -> AccessLink | None:
    if not _well_formed(token, kind):
        return None
    return rows.filter(secret_hash=digest(token)).order_by().first()


def _well_formed(token: Any, kind: LinkKind) -> bool:
    return (
        isinstance(token, str)
        and len(token) <= MAX_TOKEN_CHARS
        and token.startswith(TOKEN_PREFIX[kind])
    )


def usable(link: AccessLink, now: datetime | None = None) -> bool:
    """Whether the link works now, by the rules of the module's docstring. The sandbox (a
    file link's) and the preview (a preview token's) are read from the row's relations."""
    if not holds(link, now):
        return False
    if link.kind == LinkKind.FILE:
        return link.sandbox.status in SERVED_STATUSES  # a paused one resumes to serve it
    return link.preview is not None and link.preview.stopped_at is None


def holds(link: AccessLink, now: datetime | None = None) -> bool:
    """The link's own terms: neither revoked nor expired, its creator active and of at least
    its min_role (whatever the state of what it opens)."""
    creator = link.membership
    if link.revoked_at is not None or link.expires_at <= (now or timezone.now()):
        return False
    return creator.user.is_active and role_at_least(creator.role, link.min_role)


def role_at_least(role: str, minimum: str) -> bool:
    return _ROLE_RANK.get(role, -1) >= _ROLE_RANK.get(minimum, len(_ROLE_RANK))


def mark_used(link: AccessLink, interval: timedelta = timedelta(0)) -> None:
    """Record a use as last_used_at, at most once per `interval` (judged by the row as read)."""
    now = timezone.now()
    if link.last_used_at is not None and now - link.last_used_at < interval:
        return
    AccessLink.objects.filter(pk=link.pk).update(last_used_at=now)
    link.last_used_at = now


# --- the services ----------------------------------------------------------------------------


@audited("link.list", "sandbox", kind=AUDIT_VIEW)
def list_links(principal: Principal, sandbox_id: str) -> list[LinkInfo]:
    """The sandbox's file links and preview tokens that work (those of open previews, whose
    creator still may), newest first; any member of the team may see them. Their secrets are
    not kept, so never shown."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see links")
    rows = (
        sandbox.links.unexpired()
        .filter(Q(preview__isnull=True) | Q(preview__stopped_at__isnull=True))
        .select_related("membership__user", "created_by", "preview")
        .order_by("-created_at", "-id")[:MAX_LISTED]
    )
    now, found = timezone.now(), []
    for link in rows:
        link.sandbox = sandbox
        if holds(link, now):  # a file link of a sandbox not running works when it runs again
            found.append(LinkInfo.from_model(link))
    return found


@audited("link.revoke", "sandbox", atomic=True)
def revoke_link(principal: Principal, sandbox_id: str, link_id: str) -> LinkInfo:
    """Revoke one link of the sandbox: it stops working at once, the others do not. Its
    creator, or an owner or admin of the team, may; revoking it again changes nothing."""
    current().target("sandbox", sandbox_id)
    link_id = _link_id(link_id)
    current().details["link_id"] = link_id
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "revoke links")
    link = (
        sandbox.links.select_related("created_by", "revoked_by")
        .filter(public_id=link_id)
        .order_by()
        .first()
    )
    if link is None:
        raise NotFound(f"link {link_id} not found in sandbox {sandbox.public_id}")
    creator = link.created_by.get_username() if link.created_by else None
    current().details.update({"kind": link.kind, "created_by": creator})
    if not _may_revoke(principal, link):
        raise PermissionDenied(
            "only the link's creator or the team's owners and admins may revoke it"
        )
    AccessLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=principal.user
    )
    link.refresh_from_db(fields=["revoked_at", "revoked_by"])
    link.sandbox = sandbox
    return LinkInfo.from_model(link)


def _may_revoke(principal: Principal, link: AccessLink) -> bool:
    mine = principal.user is not None and link.created_by_id == principal.user.pk
    return mine or access.role_of(principal) in (Role.OWNER, Role.ADMIN)


def _link_id(value: Any) -> str:
    if not isinstance(value, str) or not LINK_ID_RE.match(value):
        raise InvalidInput(
            f"malformed link id {str(value)[:40]!r}: link ids look like lnk_ followed by 12 "
            "lowercase letters and digits"
        )
    return value
