"""The "Previews" section's views on the sandbox page: open a port as a preview, deploy an app,
stop one, and "Open" in host mode (a fresh token, then the preview). The section's forms and
context are in sandboxes/web/previews_section.py; the proxy that serves a preview is
sandboxes/proxy/.

Every view calls services only; another team's sandbox is not found (404) there, and a
viewer's POST is refused there (403).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import NotFound, ServiceError
from sandboxes.web.common import attach_error, refused
from sandboxes.web.previews_section import (
    DeployForm,
    OpenPreviewForm,
    host_mode,
    is_public,
    may_publish,
)
from sandboxes.web.principal import identity_for, principal_for, team_required
from sandboxes.web.sandbox import render_page

# The token of an "Open" click in host mode becomes the preview's cookie in that browser, so
# its life is how long the opened tab keeps working: an hour, then "Open" again (a viewer's:
# the most he may have, services.VIEWER_TOKEN_SECONDS). The token never stays in the address
# bar: the proxy swaps it for the cookie with a redirect.
OPEN_TOKEN_SECONDS = 3600
FIELD_WORDS = {"port": "port", "wait": "wait_seconds", "command": "command"}


# --- views -----------------------------------------------------------------------------------


def _back(sandbox_id: str) -> HttpResponse:
    return redirect(reverse("web:sandbox", args=[sandbox_id]) + "#previews")


def _refusal(request: HttpRequest, exc: ServiceError) -> bool:
    """Whether the error gets a page of its own rather than a place in the form: another
    team's sandbox (404), or a write by someone who may not write (403). A member's 403
    (a port the team may not preview) is about what he typed: the form shows it."""
    if exc.http_status == 404:
        return True
    return exc.http_status == 403 and not identity_for(request).can_write


@team_required
@require_POST
def open_port(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """Open a preview of a port (an app started any other way), or change its "public"."""
    form = OpenPreviewForm(request.POST, may_publish=may_publish(request))
    if not form.is_valid():
        return render_page(request, sandbox_id, status=400, preview_form=form)
    port = form.cleaned_data["port"]
    try:
        link = services.get_preview_url(
            principal_for(request), sandbox_id, port, public=form.public_choice()
        )
    except ServiceError as exc:
        if _refusal(request, exc):
            return refused(request, exc)
        attach_error(form, exc, {"port": "port", "public": "public"})
        return render_page(request, sandbox_id, status=exc.http_status, preview_form=form)
    public = " to anyone with its address" if link.public else ""
    messages.success(request, f"Port {port} is open as a preview{public}.")
    return _back(sandbox_id)


@team_required
@require_POST
def deploy(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """Start an app as a background job and wait until its port answers (deploy_app). On
    failure the service's message, which ends with the app's log, shows above the form."""
    form = DeployForm(request.POST)
    if not form.is_valid():
        return render_page(request, sandbox_id, status=400, deploy_form=form)
    wait = form.cleaned_data["wait_seconds"] or services.DEFAULT_WAIT_SECONDS
    try:
        app = services.deploy_app(
            principal_for(request),
            sandbox_id,
            command=form.cleaned_data["command"],
            port=form.cleaned_data["port"],
            wait_seconds=wait,
        )
    except ServiceError as exc:
        if _refusal(request, exc):
            return refused(request, exc)
        # The log tail is the point of a failed deploy: above the form, whole, never beside
        # a field (where a word of the log could put it).
        fields = {} if isinstance(exc, services.DeployFailed) else FIELD_WORDS
        attach_error(form, exc, fields)
        return render_page(request, sandbox_id, status=exc.http_status, deploy_form=form)
    messages.success(
        request, f"The app answers on port {app.port} (background command #{app.command_id})."
    )
    return _back(sandbox_id)


@team_required
@require_POST
def stop(request: HttpRequest, sandbox_id: str, port: int) -> HttpResponse:
    """Close the port's preview and stop the app deploy_app started on it."""
    try:
        info = services.stop_app(principal_for(request), sandbox_id, port)
    except ServiceError as exc:
        return refused(request, exc)
    stopped = f" and its app (#{info.command_id})" if info.command_id else ""
    messages.success(request, f"The preview of port {port}{stopped} was stopped.")
    return _back(sandbox_id)


@team_required
@require_GET
def open_preview(request: HttpRequest, sandbox_id: str, port: int) -> HttpResponse:
    """The "Open" link in host mode: a fresh token for an open preview, then the preview.

    Only a preview already open is opened here (a GET must not reopen a stopped one). In
    path mode, or for a public preview, the preview's own address is enough."""
    principal = principal_for(request)
    try:
        found = services.list_previews(principal, sandbox_id)
        info = next((p for p in found if p.port == port), None)
        if info is None:
            raise NotFound(f"no open preview on port {port} of sandbox {sandbox_id}")
        token = None
        if host_mode() and not is_public(request, info):
            writer = identity_for(request).can_write
            seconds = OPEN_TOKEN_SECONDS if writer else services.VIEWER_TOKEN_SECONDS
            link = services.get_preview_url(principal, sandbox_id, port, expires_seconds=seconds)
            token = link.token
    except ServiceError as exc:
        return refused(request, exc)
    base = request.build_absolute_uri("/")
    response = redirect(services.preview_url(base, sandbox_id, port, token))
    # The address carries a credential: keep it out of caches and Referer headers.
    response["Cache-Control"] = "private, no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response
