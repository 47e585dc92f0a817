"""Snapshots on the pages: "Snapshot" on a sandbox's page (with a name), the team's snapshots
on Home with "New sandbox from it" and Delete. Every view calls the services; a refusal that
is not about what was typed (another team's snapshot: 404, a viewer: 403) gets a page of its
own, anything else a message above the section it came from."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.views.decorators.http import require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.web.common import refused
from sandboxes.web.principal import principal_for, team_required

REFUSED_STATUSES = frozenset({403, 404})


def _home() -> HttpResponse:
    return redirect(reverse("web:home") + "#snapshots")


@team_required
@require_POST
def take(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    name = request.POST.get("name", "")
    try:
        made = services.snapshot_sandbox(principal_for(request), sandbox_id, name)
    except ServiceError as exc:
        if exc.http_status in REFUSED_STATUSES:
            return refused(request, exc)
        messages.error(request, f"No snapshot was taken: {exc.message}")
        return redirect(reverse("web:sandbox", args=[sandbox_id]) + "#snapshot")
    size = filesizeformat(made.size_bytes)
    messages.success(request, f"Snapshot {made.name} was taken ({size}).")
    return _home()


@team_required
@require_POST
def create_from(request: HttpRequest, snapshot_id: str) -> HttpResponse:
    try:
        made = services.create_sandbox(principal_for(request), snapshot=snapshot_id)
    except ServiceError as exc:
        if exc.http_status in REFUSED_STATUSES:
            return refused(request, exc)
        messages.error(request, f"No sandbox was made from the snapshot: {exc.message}")
        return _home()
    messages.success(request, f"Sandbox {made.id} started from the snapshot.")
    return redirect("web:sandbox", made.id)


@team_required
@require_POST
def delete(request: HttpRequest, snapshot_id: str) -> HttpResponse:
    try:
        gone = services.delete_snapshot(principal_for(request), snapshot_id)
    except ServiceError as exc:
        if exc.http_status in REFUSED_STATUSES:
            return refused(request, exc)
        messages.error(request, exc.message)
        return _home()
    messages.success(request, f"Snapshot {gone.name} was deleted.")
    return _home()


def snapshots_context(request: HttpRequest) -> dict[str, Any]:
    """The team's snapshots for Home's section, or why there are none to show."""
    try:
        return {"snapshots": services.list_snapshots(principal_for(request))}
    except ServiceError as exc:
        return {"snapshots": [], "snapshots_error": exc.message}
