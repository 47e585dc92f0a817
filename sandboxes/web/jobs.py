"""Background jobs on the sandbox page: start one, follow its output live, cancel it.

The live tail is htmx polling (`hx-trigger="every 1s"`) of the tail partial, which calls
services.check_background each time; once the job has ended the partial comes back without
the trigger, and the polling stops.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.results import BackgroundCheck
from sandboxes.web.common import attach_error, refused
from sandboxes.web.principal import identity_for, principal_for, team_required
from sandboxes.web.sandbox import REFUSED_STATUSES, render_page
from sandboxes.web.sandbox_forms import StartJobForm

TAIL_LINES = 200


@team_required
@require_POST
def start(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    form = StartJobForm(request.POST)
    if not form.is_valid():
        return render_page(request, sandbox_id, status=400, job_form=form)
    try:
        job = services.start_background(
            principal_for(request),
            sandbox_id,
            form.cleaned_data["command"],
            max_runtime_seconds=form.cleaned_data["max_runtime_seconds"],
        )
    except ServiceError as exc:
        if exc.http_status in REFUSED_STATUSES:
            return refused(request, exc)
        attach_error(form, exc, {"command": "command", "runtime": "max_runtime_seconds"})
        return render_page(request, sandbox_id, status=exc.http_status, job_form=form)
    messages.success(request, f"Started background command #{job.id}.")
    return redirect("web:sandbox-job", sandbox_id, job.id)


def runtime_note(job: BackgroundCheck) -> str:
    """What the time limit means for the job as it stands: a promise while it runs, what
    happened once it has ended."""
    limit = f"{job.max_runtime_seconds:.0f} s"
    if job.running or job.status == "queued":
        return f"will be stopped after {limit} if still running"
    notes = {
        "timed_out": f"stopped after {limit}: its time limit",
        "cancelled": "cancelled before its time limit",
        "succeeded": f"ended by itself, within its time limit of {limit}",
        "failed": f"ended by itself, within its time limit of {limit}",
    }
    return notes.get(job.status, "ended without running to its time limit")


def _context(request: HttpRequest, sandbox_id: str, check: BackgroundCheck) -> dict[str, Any]:
    return {
        "sandbox_id": sandbox_id,
        "job": check,
        "runtime_note": runtime_note(check),
        "can_write": identity_for(request).can_write,
    }


def _check(request: HttpRequest, sandbox_id: str, command_id: int) -> BackgroundCheck:
    return services.check_background(
        principal_for(request), sandbox_id, command_id, tail_lines=TAIL_LINES
    )


@team_required
@require_GET
def job(request: HttpRequest, sandbox_id: str, command_id: int) -> HttpResponse:
    try:
        info = services.get_sandbox(principal_for(request), sandbox_id)
        check = _check(request, sandbox_id, command_id)
    except ServiceError as exc:
        return refused(request, exc)
    context = {"sandbox": info, **_context(request, sandbox_id, check)}
    return render(request, "web/sandbox/job.html", context)


@team_required
@require_GET
def tail(request: HttpRequest, sandbox_id: str, command_id: int) -> HttpResponse:
    """The tail partial, polled every second while the job runs."""
    try:
        check = _check(request, sandbox_id, command_id)
    except ServiceError as exc:
        return refused(request, exc)
    return render(request, "web/sandbox/_job_tail.html", _context(request, sandbox_id, check))


@team_required
@require_POST
def cancel(request: HttpRequest, sandbox_id: str, command_id: int) -> HttpResponse:
    try:
        check = services.cancel_background(principal_for(request), sandbox_id, command_id)
    except ServiceError as exc:
        return refused(request, exc)
    if check.status == "cancelled":
        messages.success(request, f"Background command #{command_id} was cancelled.")
    else:
        messages.info(
            request, f"Background command #{command_id} had already ended: {check.status}."
        )
    return redirect("web:sandbox-job", sandbox_id, command_id)
