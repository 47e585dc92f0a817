"""Hosts: the hosts the team may use, their load drawn as bars and as charts of the last
hour, and their idle score."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.results import HostInfo
from sandboxes.web import charts
from sandboxes.web.common import refused
from sandboxes.web.principal import principal_for, team_required
from tenants.principal import Principal


@team_required
@require_GET
def hosts(request: HttpRequest) -> HttpResponse:
    principal = principal_for(request)
    try:
        found = services.list_hosts(principal)
        rows = [
            {"host": h, "state": _state(h), "charts": _charts(principal, h), **_loads(h)}
            for h in found
        ]
    except ServiceError as exc:
        return refused(request, exc)
    return render(request, "web/hosts.html", {"rows": rows})


def _charts(principal: Principal, host: HostInfo) -> list[charts.Chart]:
    """The host's load over the last hour, one sample per probe."""
    metrics = services.get_host_metrics(principal, host.name, minutes=60)
    return charts.host_charts(metrics, slugify(host.name))


def _state(host: HostInfo) -> str:
    if not host.enabled:
        return "disabled"
    if not host.healthy:
        return "down"
    return "draining" if host.draining else "ok"


def _loads(host: HostInfo) -> dict[str, object]:
    running, most = host.sandboxes_running, host.max_sandboxes
    return {
        "sandboxes_percent": min(100, round(100 * running / most)) if most else 100,
        "sandboxes_text": f"{running} of {most}",
        "idle_percent": round(100 * host.idle_score),
        "idle_text": f"{host.idle_score:.2f}",
    }
