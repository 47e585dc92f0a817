"""File links on the web: "copy link" on a file row makes one (an htmx POST that swaps in a
field holding the URL), and /links/<token>/ downloads the file without a session.

An invalid, expired, tampered or revoked link is a plain 404 page; every use is audited by
the service (sandboxes/services/links.py).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.http.streaming import download
from sandboxes.web.principal import principal_for, team_required
from tenants.apikeys import clean_address
from tenants.models import Channel
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
