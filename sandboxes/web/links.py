"""Links on the web: "copy link" on a file row makes a file link (an htmx POST that swaps in
a field holding the URL), /links/<token>/ downloads the file without a session, and the
sandbox page's "Links" section lists the sandbox's working file links and preview tokens
with a Revoke button for those who may revoke them (links_context, revoke).

An invalid, expired, changed or revoked link is a plain 404 page; every use is audited by
the service (sandboxes/services/links.py; the rules of links: access_links.py).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.links import LinkInfo
from sandboxes.http.streaming import download
from sandboxes.web.common import refused
from sandboxes.web.principal import identity_for, principal_for, team_required
from tenants.apikeys import clean_address
from tenants.models import Channel, Role
from tenants.principal import Principal


@team_required
@require_POST
def create(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    path = request.POST.get("path", "")
    context: dict[str, Any] = {"sandbox_id": sandbox_id, "path": path}
    try:
        link = services.create_file_link(principal_for(request), sandbox_id, path)
    except ServiceError as exc:
        context["error"] = exc.message
        return render(request, "web/sandbox/_link.html", context, status=exc.http_status)
    url = request.build_absolute_uri(reverse("web:file-link", args=[link.token]))
    context.update({"link": link, "url": url})
    return render(request, "web/sandbox/_link.html", context)


@require_GET
def open_link(request: HttpRequest, token: str) -> HttpResponseBase:
    """The file of a link, to whoever holds it: no session needed, none used."""
    anonymous = Principal(
        user=None,
        team=None,
        channel=Channel.WEB,
        source_address=clean_address(request.META.get("REMOTE_ADDR")),
    )
    try:
        linked = services.open_file_link(anonymous, token)
    except ServiceError as exc:
        context = {"message": exc.message, "status": exc.http_status}
        return render(request, "web/sandbox/link_invalid.html", context, status=exc.http_status)
    response = download(linked.stream, linked.path)
    # The URL is the credential: keep it out of caches and of other sites' Referer headers.
    response["Cache-Control"] = "private, no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


@team_required
@require_POST
def revoke(request: HttpRequest, sandbox_id: str, link_id: str) -> HttpResponse:
    """Revoke one link of the sandbox (its maker, or an owner or admin of the team)."""
    try:
        revoked = services.revoke_link(principal_for(request), sandbox_id, link_id)
    except ServiceError as exc:
        return refused(request, exc)
    what = "file link" if revoked.kind == "file" else "preview link"
    messages.success(request, f"The {what} {revoked.id} was revoked: it no longer works.")
    return redirect(reverse("web:sandbox", args=[sandbox_id]) + "#links")


def links_context(request: HttpRequest, sandbox_id: str) -> dict[str, Any]:
    """The "Links" section: the sandbox's working links, each with whether this user may
    revoke it (the service decides again on the POST), or why the list could not be read."""
    identity = identity_for(request)
    try:
        found = services.list_links(principal_for(request), sandbox_id)
    except ServiceError as exc:
        return {"links": [], "links_error": exc.message}
    rows = [{"link": link, "may_revoke": _may_revoke(request, identity, link)} for link in found]
    return {"links": rows, "links_error": ""}


def _may_revoke(request: HttpRequest, identity: Any, link: LinkInfo) -> bool:
    if not identity.can_write:
        return False
    mine = link.created_by == request.user.get_username()
    return mine or identity.role in (Role.OWNER, Role.ADMIN)
