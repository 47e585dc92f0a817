"""Hosts: the hosts the team may use, their load drawn as bars, and their idle score."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.results import HostInfo
from sandboxes.web.common import refused
from sandboxes.web.principal import principal_for, team_required


@team_required
@require_GET
def hosts(request: HttpRequest) -> HttpResponse:
    try:
        found = services.list_hosts(principal_for(request))
    except ServiceError as exc:
        return refused(request, exc)
    rows = [{"host": h, "state": _state(h), **_loads(h)} for h in found]
    return render(request, "web/hosts.html", {"rows": rows})


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
