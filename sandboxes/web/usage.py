"""Usage charts of the sandbox page: the partial htmx loads and refreshes every 30 s."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.web import charts
from sandboxes.web.common import refused
from sandboxes.web.principal import principal_for, team_required


@team_required
@require_GET
def sandbox_usage(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    try:
        metrics = services.get_sandbox_metrics(principal_for(request), sandbox_id, minutes=60)
    except ServiceError as exc:
        return refused(request, exc)
    context = {"charts": charts.sandbox_charts(metrics), "metrics": metrics}
    return render(request, "web/sandbox/_usage_charts.html", context)
