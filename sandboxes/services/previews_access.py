"""The proxy's side of previews: who may open a preview, and the stream to its port.

authorize_preview runs on every proxied request, so it costs a few indexed reads and no
audit row, except the first time a session, a token (or, for a public preview, an address
within the hour) opens the preview: that is "preview.opened", remembered in the cache. A
token is a row (access_links.py): one indexed read by its hash, joined with its creator's
membership, which decides whether it still works.
Every refusal is the same NotFound: another team's sandbox, a stopped preview, a forged or
expired token and no credentials at all cannot be told apart.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.utils import timezone

from dbkit.prepared import PreparedRead
from hosts.backends.base import BackendError, PortClosed, PortStream, SandboxGone
from sandboxes.contract.errors import BackendFailure, InvalidInput, NotFound
from sandboxes.models import SERVED_STATUSES, AccessLink, Preview, Sandbox, SandboxStatus
from sandboxes.policy import validation
from sandboxes.services import access_links, waking
from sandboxes.services.common import ACTIVITY_WRITE_INTERVAL, backend_of, mark_lost, touch
from sandboxes.services.previews_tokens import INVALID
from tenants import audit
from tenants.apikeys import clean_address
from tenants.models import AuditKind, Channel, Membership
from tenants.principal import Principal

# How long "already opened" is remembered: a session for a day, a public preview's visitor
# (an address) for an hour; a token until it expires.
SESSION_AUDIT_SECONDS = 24 * 3600
PUBLIC_AUDIT_SECONDS = 3600


@dataclass(frozen=True)
class PreviewRequest:
    """What the proxy knows of one incoming request."""

    sandbox_id: str  # public id, e.g. "sb_abc123"
    port: int
    user_id: int | None  # the Django session's authenticated user, else None
    session_key: str | None  # that session's key (audit once per session)
    token: str | None  # from ?sandhub_token= (first visit) or the preview cookie
    address: str | None  # client address (audit)


@dataclass(frozen=True)
class PreviewGrant:
    sandbox_id: str
    port: int
    preview_id: int
    via: str  # "session" | "token" | "public"
    token: str | None  # the valid token presented (the proxy sets it as the cookie)
    token_expires_at: datetime | None
    team_id: int | None = None  # the sandbox's team (the proxy's fair share counts by it)


def authorize_preview(request: PreviewRequest) -> PreviewGrant:
    """Whether this request may reach the preview: a session of a member of the sandbox's
    team (any role), a valid token for exactly this preview, or nothing at all for a public
    preview of a team that allows them. NotFound for every refusal."""
    return _authorized(request)[0]


def _authorized(request: PreviewRequest) -> tuple[PreviewGrant, Sandbox]:
    sandbox, preview = _open_preview(request.sandbox_id, request.port)
    membership = _member(request.user_id, sandbox)
    if membership is not None:
        grant = PreviewGrant(
            sandbox.public_id, preview.port, preview.pk, "session", None, None, sandbox.team_id
        )
        who = request.session_key or f"user-{request.user_id}"
        _audit_once(grant, sandbox, request, who, SESSION_AUDIT_SECONDS, membership.user)
        return grant, sandbox
    if request.token:
        found = _token_grant(request.token, sandbox, preview)
        if found is not None:
            by_token, link = found
            seconds = max(1, int((link.expires_at - timezone.now()).total_seconds()))
            _audit_once(by_token, sandbox, request, link.public_id, seconds, None, link)
            access_links.mark_used(link, access_links.LAST_USED_INTERVAL)
            return by_token, sandbox
    if preview.public and sandbox.team.allow_public_previews:
        grant = PreviewGrant(
            sandbox.public_id, preview.port, preview.pk, "public", None, None, sandbox.team_id
        )
        who = request.address or "unknown"
        _audit_once(grant, sandbox, request, who, PUBLIC_AUDIT_SECONDS, None)
        return grant, sandbox
    raise NotFound(INVALID)


# A paused or stopped sandbox's previews are served too: resumed once a request is authorized.
_SERVED = sorted(SERVED_STATUSES)
# Every proxied request reads its preview like this: compiled once (dbkit/prepared.py).
_running_preview: PreparedRead[Preview] = PreparedRead(
    lambda sandbox_id, port: (
        Preview.objects.open()
        .select_related("sandbox__team", "sandbox__host")
        .filter(sandbox__public_id=sandbox_id, sandbox__status__in=_SERVED, port=port)
        .order_by()[:1]
    ),
    "\x00sandbox placeholder",
    1_734_028_196,  # within the 32-bit range of a positive field: Django drops others
)


def _open_preview(sandbox_id: Any, port: Any) -> tuple[Sandbox, Preview]:
    try:
        validation.sandbox_id(sandbox_id)
    except InvalidInput:
        raise NotFound(INVALID) from None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise NotFound(INVALID)
    preview = _running_preview.first(sandbox_id, port)
    if preview is None:
        raise NotFound(INVALID)
    return preview.sandbox, preview


def _member(user_id: int | None, sandbox: Sandbox) -> Membership | None:
    if user_id is None:
        return None
    return (
        Membership.objects.select_related("user")
        .filter(user_id=user_id, user__is_active=True, team_id=sandbox.team_id)
        .order_by()
        .first()
    )


def _token_grant(
    token: str, sandbox: Sandbox, preview: Preview
) -> tuple[PreviewGrant, AccessLink] | None:
    """The grant of a token made for exactly this open preview, while it works (it acts for
    its creator: access_links.usable); None for any other token."""
    link = access_links.preview_token(token, preview)
    if link is None:
        return None
    link.preview = preview
    if not access_links.usable(link):
        return None
    grant = PreviewGrant(
        sandbox.public_id,
        preview.port,
        preview.pk,
        "token",
        token,
        link.expires_at,
        sandbox.team_id,
    )
    return grant, link


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _audit_once(
    grant: PreviewGrant,
    sandbox: Sandbox,
    request: PreviewRequest,
    who: str,
    seconds: int,
    user: Any,
    link: AccessLink | None = None,
) -> None:
    """One "preview.opened" row per preview and session / token / public visitor, for as
    long as the cache remembers it (per process with the in-memory cache)."""
    key = f"sandhub:preview-opened:{grant.preview_id}:{grant.via}:{_digest(who)}"
    if not cache.add(key, 1, timeout=seconds):
        return
    details: dict[str, Any] = {"port": grant.port, "preview_id": grant.preview_id, "via": grant.via}
    if link is not None:
        details["link_id"] = link.public_id
        details["token_expires_at"] = link.expires_at.isoformat()
        details["created_by"] = link.membership.user.get_username()
    principal = Principal(
        user=user,
        team=sandbox.team,
        channel=Channel.WEB,
        source_address=clean_address(request.address),
    )
    audit.record(
        principal,
        "preview.opened",
        target_type="sandbox",
        target_id=sandbox.public_id,
        details=details,
        kind=AuditKind.READ,
    )


def open_preview(request: PreviewRequest, timeout: float = 5.0) -> tuple[PreviewGrant, PortStream]:
    """authorize_preview and open_preview_stream in one: the sandbox row the authorization
    read is the one the stream opens on (one query and one thread hop less per request)."""
    grant, sandbox = _authorized(request)
    _awake(sandbox, grant, request)
    return grant, _stream(sandbox, grant, timeout)


def open_preview_stream(grant: PreviewGrant, timeout: float = 5.0) -> PortStream:
    """A byte stream to the preview's port inside the sandbox (the backend's own transport).

    Counts as the sandbox's activity (at most one write every few seconds), so the idle sweep
    leaves a sandbox alone while its preview is used. NotFound when the sandbox went since
    the grant; BackendFailure (502) with a message for a person when nothing listens.
    """
    sandbox = (
        Sandbox.objects.select_related("host", "team")
        .filter(public_id=grant.sandbox_id, status__in=_SERVED)
        .order_by()
        .first()
    )
    if sandbox is None:
        raise NotFound(INVALID)
    _awake(sandbox, grant, None)
    return _stream(sandbox, grant, timeout)


def _awake(sandbox: Sandbox, grant: PreviewGrant, request: PreviewRequest | None) -> None:
    """Resume the preview's sandbox if it is paused or stopped: only ever after the request
    was authorized (a stranger's request is refused before this). The resume is audited
    for the session's user, or for nobody in particular (a token, a public preview)."""
    if sandbox.status == SandboxStatus.RUNNING:
        return
    user = None
    if request is not None and grant.via == "session" and request.user_id is not None:
        user = get_user_model().objects.filter(pk=request.user_id).first()
    principal = Principal(
        user=user,
        team=sandbox.team,
        channel=Channel.WEB,
        source_address=clean_address(request.address) if request else None,
    )
    waking.wake(principal, sandbox, f"preview.open {grant.preview_id} via {grant.via}")


def _stream(sandbox: Sandbox, grant: PreviewGrant, timeout: float) -> PortStream:
    try:
        stream = backend_of(sandbox).open_port(sandbox.backend_state, grant.port, timeout)
    except PortClosed as exc:
        raise BackendFailure(
            f"nothing answers on port {grant.port} in sandbox {sandbox.public_id}: the app "
            f"is not running, not started yet, or listens on another port ({exc})"
        ) from exc
    except SandboxGone as exc:
        mark_lost(sandbox, str(exc))
        raise NotFound(INVALID) from exc
    except BackendError as exc:
        raise BackendFailure(
            f"could not reach port {grant.port} in sandbox {sandbox.public_id}: {exc}"
        ) from exc
    except TimeoutError as exc:
        raise BackendFailure(
            f"port {grant.port} in sandbox {sandbox.public_id} did not answer within {timeout:g} s"
        ) from exc
    touch(sandbox)
    return stream


def record_preview_activity(grant: PreviewGrant) -> None:
    """Count a long-lived preview connection (a websocket, a long download) as the sandbox's
    activity while it lasts: the proxy calls this now and then (it writes at most once every
    few seconds), since open_preview_stream counts only the moment a connection opens."""
    now = timezone.now()
    Sandbox.objects.filter(
        public_id=grant.sandbox_id,
        status=SandboxStatus.RUNNING,
        last_activity_at__lt=now - ACTIVITY_WRITE_INTERVAL,
    ).update(last_activity_at=now)
