"""The team's deleted sandboxes, each linking to its command history: deleting a sandbox
removes its files, never its history, and every member of the team may read that history
(services.list_deleted_sandboxes; another team's are never listed)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.web.common import paginate, query_without_page, refused
from sandboxes.web.principal import principal_for, team_required


@team_required
@require_GET
def deleted_sandboxes(request: HttpRequest) -> HttpResponse:
    try:
        rows = services.list_deleted_sandboxes(principal_for(request))
    except ServiceError as exc:
        return refused(request, exc)
    context = {"page": paginate(request, rows), "query": query_without_page(request)}
    return render(request, "web/deleted.html", context)
