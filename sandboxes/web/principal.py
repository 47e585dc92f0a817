"""Who acts on a web page: the signed-in user, in the team chosen in the session, on the web
channel. Every web view builds its principal here and hands it to the services, which do all
the authorizing (a viewer's POST is refused there, another team's sandbox is not found there).

A member of several teams picks one in the header (`choose_team`); the choice lives in the
session. A stored team the user has since left is ignored: the first team he still belongs
to is used instead, so a removed membership takes effect on the next request.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from tenants.apikeys import clean_address
from tenants.models import Channel, Membership, Role
from tenants.principal import Principal

TEAM_SESSION_KEY = "sandhub_team"
# Cached on the request: the header, the view and the context processor ask more than once.
_CACHE_ATTR = "_sandhub_web"
MANAGER_ROLES = frozenset({Role.OWNER, Role.ADMIN})


@dataclass(frozen=True)
class WebIdentity:
    """The principal plus what the page header needs to know about the user's teams."""

    principal: Principal
    role: str | None  # the user's role in principal.team (None: no team)
    memberships: tuple[Membership, ...]

    @property
    def can_write(self) -> bool:
        return self.role in (Role.OWNER, Role.ADMIN, Role.MEMBER)

    @property
    def can_manage(self) -> bool:
        """Owners and admins: the Team page (members, audit log, command history)."""
        return self.role in MANAGER_ROLES


def _memberships(user: Any) -> tuple[Membership, ...]:
    rows = Membership.objects.filter(user=user).select_related("team")
    return tuple(rows.order_by("created_at", "id"))


def identity_for(request: HttpRequest) -> WebIdentity:
    cached = getattr(request, _CACHE_ATTR, None)
    if cached is not None:
        return cast(WebIdentity, cached)
    user = request.user
    address = clean_address(request.META.get("REMOTE_ADDR"))
    if not user.is_authenticated:
        principal = Principal(user=None, team=None, channel=Channel.WEB, source_address=address)
        found = WebIdentity(principal, None, ())
    else:
        rows = _memberships(user)
        wanted = request.session.get(TEAM_SESSION_KEY)
        chosen = next((m for m in rows if m.team.slug == wanted), rows[0] if rows else None)
        principal = Principal(
            user=user,
            team=chosen.team if chosen else None,
            channel=Channel.WEB,
            source_address=address,
        )
        found = WebIdentity(principal, chosen.role if chosen else None, rows)
    setattr(request, _CACHE_ATTR, found)
    return found


def principal_for(request: HttpRequest) -> Principal:
    """The acting principal for this request (channel WEB)."""
    return identity_for(request).principal


def choose_team(request: HttpRequest, slug: str) -> bool:
    """Act in team `slug` from now on, if the user is a member of it."""
    rows = _memberships(request.user)
    if not any(m.team.slug == slug for m in rows):
        return False
    request.session[TEAM_SESSION_KEY] = slug
    if hasattr(request, _CACHE_ATTR):
        delattr(request, _CACHE_ATTR)
    return True


def _gate(request: HttpRequest) -> HttpResponse | None:
    """A response refusing the request (not signed in, or in no team), or None to go on."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if principal_for(request).team is None:
        return render(request, "web/no_team.html", status=403)
    return None


def team_required(view: Callable[..., Any]) -> Callable[..., Any]:
    """The view needs a signed-in user who belongs to a team. Anonymous users go to the login
    page; a user in no team gets a page saying so. The view then calls principal_for(request).
    Works on sync and async views (an async view may stream)."""
    if iscoroutinefunction(view):

        async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            refused = await sync_to_async(_gate)(request)
            if refused is not None:
                return refused
            return await view(request, *args, **kwargs)

        return markcoroutinefunction(functools.wraps(view)(async_wrapper))

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        refused = _gate(request)
        return refused if refused is not None else view(request, *args, **kwargs)

    return wrapper
