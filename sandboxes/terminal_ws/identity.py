"""Who may drive a terminal over a websocket: the page's signed-in user (the Django session
cookie), in the team chosen in the session, and only from a page of the platform's own
origin.

A websocket is not covered by the same-origin policy or CSRF checks: any page the user
visits (another site, or a sandbox's preview on the preview domain, which is served by the
platform too) could open one to the platform, and the browser would send the session
cookie with it (cross-site websocket hijacking). So every upgrade must carry an Origin
header that is the platform's own origin (the scheme and Host it was addressed to, or one of
CSRF_TRUSTED_ORIGINS behind a proxy), never one under the preview domain, and a
Sec-Fetch-Site, when sent, of same-origin. No Origin at all is refused too: every browser
sends one, and a terminal has no use for other clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.sessions.backends.base import SessionBase
from django.http.request import split_domain_port, validate_host
from django.utils.module_loading import import_string

from sandboxes.http.origins import header, origin_key
from tenants.models import Channel, Membership
from tenants.principal import Principal

# The web pages keep the chosen team under this session key (sandboxes/web/principal.py).
TEAM_SESSION_KEY = "sandhub_team"


def origin_refusal(scope: dict) -> str | None:
    """Why this upgrade may not reach a terminal (None: it comes from the platform's page)."""
    site = header(scope, b"sec-fetch-site")
    if site is not None and site.strip().lower() != "same-origin":
        return "a websocket from another site"
    origin = origin_key(header(scope, b"origin") or "")
    if origin is None:
        return "a websocket without an origin of the platform"
    if _under_preview_domain(origin[1]):
        return "a websocket from a preview"
    if origin == own_origin(scope) or origin in _trusted_origins():
        return None
    return "a websocket from another origin"


def own_origin(scope: dict) -> tuple[str, str, int] | None:
    """The origin the upgrade was addressed to, if its Host is one the platform serves."""
    host = header(scope, b"host") or ""
    domain, _port = split_domain_port(host.lower())
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    return origin_key(f"{scheme}://{host}")


def _trusted_origins() -> set[tuple[str, str, int]]:
    found = (origin_key(o) for o in settings.CSRF_TRUSTED_ORIGINS if "*" not in o)
    return {key for key in found if key is not None}


def _under_preview_domain(host: str) -> bool:
    domain = settings.SANDHUB_PREVIEW_DOMAIN
    return bool(domain) and (host == domain or host.endswith("." + domain))


@dataclass(frozen=True)
class Visitor:
    principal: Principal | None  # None: nobody signed in
    session_key: str | None


def visitor(scope: dict) -> Visitor:
    """The signed-in user of the session cookie and his chosen team (blocking: run it in a
    thread). Checked as Django checks a page: the session exists, its password hash holds."""
    session_key = _cookie(scope, settings.SESSION_COOKIE_NAME)
    address = (scope.get("client") or (None,))[0]
    if not session_key:
        return Visitor(None, None)
    store: type[SessionBase] = import_string(settings.SESSION_ENGINE + ".SessionStore")
    session = store(session_key)
    user: Any = get_user(SimpleNamespace(session=session))  # type: ignore[arg-type]
    if not user.is_authenticated:
        return Visitor(None, None)
    rows = list(
        Membership.objects.filter(user=user).select_related("team").order_by("created_at", "id")
    )
    wanted = session.get(TEAM_SESSION_KEY)
    chosen = next((m for m in rows if m.team.slug == wanted), rows[0] if rows else None)
    principal = Principal(
        user=user,
        team=chosen.team if chosen else None,
        channel=Channel.WEB,
        source_address=address,
    )
    return Visitor(principal, session_key)


def still_signed_in(found: Visitor) -> bool:
    """Whether the session still holds (not signed out, password unchanged)."""
    if found.principal is None or not found.session_key:
        return False
    store: type[SessionBase] = import_string(settings.SESSION_ENGINE + ".SessionStore")
    user: Any = get_user(SimpleNamespace(session=store(found.session_key)))  # type: ignore[arg-type]
    return bool(user.is_authenticated and user.pk == found.principal.user.pk)


def _cookie(scope: dict, name: str) -> str | None:
    for key, value in scope.get("headers", []):
        if key != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            found, _, content = part.strip().partition("=")
            if found == name:
                return content
    return None
