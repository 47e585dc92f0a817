"""Pause, resume and stop from the pages (the sandbox page and the home list): POST forms,
each calling its service and coming back where it was posted from with what happened.

Refusals of another team's sandbox (404) or of a viewer (403) get the refusal page; the
others (a command running, a full quota, a host that failed) come back as a message on the
page, which still shows what the sandbox is.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.lifecycle import LifecycleChange
from sandboxes.web.common import refused
from sandboxes.web.principal import principal_for, team_required

REFUSED_STATUSES = frozenset({403, 404})
Service = Callable[..., LifecycleChange]


def _act(request: HttpRequest, sandbox_id: str, service: Service, done: str) -> HttpResponse:
    try:
        change = service(principal_for(request), sandbox_id)
    except ServiceError as exc:
        if exc.http_status in REFUSED_STATUSES:
            return refused(request, exc)
        messages.error(request, exc.message)
        return _back(request, sandbox_id)
    name = change.sandbox.name or change.sandbox.id
    if not change.changed:
        messages.info(request, f"Sandbox {name} is {change.sandbox.status} already.")
    else:
        took = f" ({change.seconds:.2f} s)" if change.seconds is not None else ""
        ended = len(change.background_ended)
        jobs = f"; {ended} background command{'s' if ended != 1 else ''} ended" if ended else ""
        messages.success(request, f"Sandbox {name} {done}{took}{jobs}.")
    return _back(request, sandbox_id)


def _back(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """Where the form was: `next` if it is a path of this site, else the sandbox's page."""
    wanted = request.POST.get("next", "")
    if wanted and url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(wanted)
    return redirect(reverse("web:sandbox", args=[sandbox_id]))


@team_required
@require_POST
def pause(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    return _act(request, sandbox_id, services.pause_sandbox, "is paused")


@team_required
@require_POST
def resume(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    return _act(request, sandbox_id, services.resume_sandbox, "is running again")


@team_required
@require_POST
def stop(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    return _act(request, sandbox_id, services.stop_sandbox, "is stopped (its files are kept)")
