"""The sandbox page: status, limits, expiry (and extending it), the command runner (its
stream is sandboxes/web/sandbox_run.py), recent commands, files, background jobs, previews
(sandboxes/web/previews_section.py) and links (sandboxes/web/links.py); and the sandbox's
command history with each command's full output.

Every view calls services only. Another team's sandbox is not found (404) by the services;
a viewer gets the page without its write controls, and the services refuse his POSTs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.results import FileEntry, SandboxInfo
from sandboxes.web.common import attach_error, paginate, query_without_page, refused
from sandboxes.web.egress import sandbox_network
from sandboxes.web.egress_forms import MODE_LABELS
from sandboxes.web.links import links_context
from sandboxes.web.previews_section import previews_context
from sandboxes.web.principal import identity_for, principal_for, team_required
from sandboxes.web.sandbox_forms import (
    WORKSPACE,
    ExtendForm,
    FileForm,
    HistoryFilterForm,
    RunForm,
    StartJobForm,
    UploadForm,
)

# Refusals that are not about what was typed (another team's sandbox: 404, a viewer's write:
# 403) get a page of their own; a form shows the errors its author can correct.
REFUSED_STATUSES = frozenset({403, 404})
RECENT_COMMANDS = 15
RECENT_JOBS = 10
HISTORY_LIMIT = 500  # the most the history service returns; filtered and paged here


def _left(request: HttpRequest, info: SandboxInfo) -> int:
    team = principal_for(request).team
    return services.extendable_minutes(info, team) if team is not None else 0


def render_page(
    request: HttpRequest, sandbox_id: str, *, status: int = 200, **bound: forms.Form
) -> HttpResponse:
    """The sandbox page; `bound` forms (with their errors) replace the blank ones."""
    principal = principal_for(request)
    try:
        info = services.get_sandbox(principal, sandbox_id)
        history = services.list_commands(principal, sandbox_id, limit=100)
    except ServiceError as exc:
        return refused(request, exc)
    running = info.status == "running"
    # Paused or stopped: the runner resumes it (the services do); the listings would too, so
    # they wait until it runs (opening the page does not wake a sandbox).
    resumable = info.status in ("paused", "stopped")
    directory = request.GET.get("path") or WORKSPACE
    listing = files_context(request, sandbox_id, directory) if running else {}
    previews = previews_context(request, sandbox_id, history, bound) if running else {}
    left = _left(request, info)
    context: dict[str, Any] = {
        "sandbox": info,
        "running": running,
        "resumable": resumable,
        "limits": _limits(info),
        "extend_left": left,
        "extend_form": bound.get("extend_form") or ExtendForm(left=left),
        "run_form": RunForm(),
        "upload_form": bound.get("upload_form") or UploadForm(initial={"directory": directory}),
        "file_form": bound.get("file_form") or FileForm(initial={"directory": directory}),
        "job_form": bound.get("job_form") or StartJobForm(),
        "commands": [c for c in history if not c.background][:RECENT_COMMANDS],
        "jobs": [c for c in history if c.background][:RECENT_JOBS],
        **listing,
        **previews,
        **links_context(request, sandbox_id),
        **sandbox_network(request, sandbox_id),
    }
    return render(request, "web/sandbox/page.html", context, status=status)


def files_context(request: HttpRequest, sandbox_id: str, directory: str) -> dict[str, Any]:
    """A directory's listing for the files section (folders first), or why there is none."""
    entries: list[FileEntry] = []
    error = ""
    try:
        entries = services.list_files(principal_for(request), sandbox_id, directory)
    except ServiceError as exc:
        error = exc.message
    entries.sort(key=lambda e: (e.kind != "dir", e.name.lower()))
    # A file's own path lists the file itself: show it in its folder instead.
    if len(entries) == 1 and entries[0].path == directory.rstrip("/") and entries[0].kind != "dir":
        directory = entries[0].path.rsplit("/", 1)[0] or "/"
    rows = [
        {
            "entry": e,
            "modified": datetime.fromtimestamp(e.mtime, tz=UTC) if e.mtime else None,
        }
        for e in entries
    ]
    return {
        "rows": rows,
        "directory": directory,
        "crumbs": _crumbs(directory),
        "parent": (directory.rsplit("/", 1)[0] or "/") if directory != "/" else "",
        "files_error": error,
    }


def _crumbs(directory: str) -> list[tuple[str, str]]:
    """("/name", path) for each folder down to `directory`: together they read as its path,
    each part a link to its folder."""
    parts = [p for p in directory.split("/") if p]
    return [("/" + p, "/" + "/".join(parts[: i + 1])) for i, p in enumerate(parts)] or [("/", "/")]


def _limits(info: SandboxInfo) -> list[tuple[str, str]]:
    disk = f"{info.disk_mb} MB" if info.disk_mb else "host default"
    return [
        ("CPUs", f"{info.cpus:g}"),
        ("Memory", f"{info.memory_mb} MB"),
        ("Disk (/workspace)", disk),
        ("Processes", str(info.pids_limit)),
        ("Network", MODE_LABELS.get(info.network_mode, info.network_mode)),
    ]


@team_required
@require_GET
def page(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    return render_page(request, sandbox_id)


@team_required
@require_POST
def extend(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    principal = principal_for(request)
    try:
        info = services.get_sandbox(principal, sandbox_id)
    except ServiceError as exc:
        return refused(request, exc)
    form = ExtendForm(request.POST, left=_left(request, info))
    if not form.is_valid():
        return render_page(request, sandbox_id, status=400, extend_form=form)
    try:
        info = services.extend_sandbox(principal, sandbox_id, form.cleaned_data["minutes"])
    except ServiceError as exc:
        if exc.http_status in REFUSED_STATUSES:
            return refused(request, exc)
        attach_error(form, exc, {"minute": "minutes", "lifetime": "minutes"})
        return render_page(request, sandbox_id, status=exc.http_status, extend_form=form)
    minutes = form.cleaned_data["minutes"]
    messages.success(request, f"Sandbox {info.name or info.id} lives {minutes} minutes longer.")
    return redirect("web:sandbox", sandbox_id)


@team_required
@require_GET
def history(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    principal = principal_for(request)
    form = HistoryFilterForm(request.GET or None)
    wanted = form.cleaned_data.get("status") if form.is_valid() else ""
    try:
        # A deleted sandbox of the team too: its history is what is left of it (read only).
        found = services.sandbox_history(principal, sandbox_id, limit=HISTORY_LIMIT)
    except ServiceError as exc:
        return refused(request, exc)
    rows = found.commands
    if wanted:
        rows = [c for c in rows if c.status == wanted]
    context = {
        "sandbox": found.sandbox,
        "deleted": found.deleted,
        "form": form,
        "page": paginate(request, rows),
        "query": query_without_page(request),
        "limit": HISTORY_LIMIT,
    }
    status = 400 if request.GET and not form.is_valid() else 200
    return render(request, "web/sandbox/history.html", context, status=status)


@team_required
@require_GET
def command(request: HttpRequest, sandbox_id: str, command_id: int) -> HttpResponse:
    try:
        # Of this sandbox only (another of the team's is not under this URL), deleted or not.
        found = services.history_command(principal_for(request), sandbox_id, command_id)
    except ServiceError as exc:
        return refused(request, exc)
    context = {
        "sandbox": found.sandbox,
        "deleted": found.deleted,
        "command": found.commands[0],
        "can_write": identity_for(request).can_write and not found.deleted,
    }
    return render(request, "web/sandbox/command.html", context)
