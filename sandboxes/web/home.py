"""Home: the team's sandboxes (searched, sorted and paged by the services), the form that
creates one, delete, and the team's quotas."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import InvalidInput, PermissionDenied, ServiceError
from sandboxes.contract.listing import SandboxPage
from sandboxes.services.team import TeamUsage, team_usage
from sandboxes.web.common import attach_error, refused
from sandboxes.web.egress import network_modes
from sandboxes.web.forms import CreateSandboxForm
from sandboxes.web.principal import identity_for, principal_for, team_required
from sandboxes.web.snapshots import snapshots_context

# A create refusal naming one of these words is shown next to that field.
CREATE_FIELDS = {
    "allow:": "allow",  # a rule that is wrong, or outside the team's allow-list
    "allow-list:": "allow",
    "image": "image",
    "cpus": "cpus",
    "memory": "memory_mb",
    "disk": "disk_mb",
    "lifetime": "lifetime_minutes",
    "minutes": "lifetime_minutes",
    "network": "network",
    "rule": "allow",
    "name": "name",
}


@team_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    principal = principal_for(request)
    try:
        usage = team_usage(principal)
        modes = network_modes(principal, usage.allow_network)
    except ServiceError as exc:
        return refused(request, exc)
    return _page(request, usage, CreateSandboxForm(usage=usage, network_modes=modes))


@team_required
@require_POST
def create(request: HttpRequest) -> HttpResponse:
    principal = principal_for(request)
    try:
        usage = team_usage(principal)
        modes = network_modes(principal, usage.allow_network)
    except ServiceError as exc:
        return refused(request, exc)
    form = CreateSandboxForm(request.POST, usage=usage, network_modes=modes)
    status = 400
    if form.is_valid():
        data = form.cleaned_data
        try:
            info = services.create_sandbox(
                principal,
                image=data["image"],
                name=data["name"],
                cpus=data["cpus"],
                memory_mb=data["memory_mb"],
                disk_mb=data["disk_mb"],
                lifetime_minutes=data["lifetime_minutes"],
                # No network field when the team may not: the team's default (off).
                network=data["network"] if "network" in form.fields else None,
                allow=form.allow_rules(),
            )
        except PermissionDenied as exc:
            if not identity_for(request).can_write:
                return refused(request, exc)  # a viewer has no form to show the message on
            attach_error(form, exc, CREATE_FIELDS)  # a mode or a name the team does not allow
            status = exc.http_status
        except ServiceError as exc:
            attach_error(form, exc, CREATE_FIELDS)
            status = exc.http_status
        else:
            messages.success(request, f"Sandbox {info.name or info.id} is {info.status}.")
            return redirect("web:home")
    return _page(request, usage, form, status=status)


@team_required
@require_POST
def delete(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    try:
        info = services.delete_sandbox(principal_for(request), sandbox_id)
    except ServiceError as exc:
        return refused(request, exc)
    messages.success(request, f"Sandbox {info.name or info.id} was deleted.")
    return redirect("web:home")


def _page(
    request: HttpRequest, usage: TeamUsage, form: CreateSandboxForm, status: int = 200
) -> HttpResponse:
    try:
        listing, list_error = _listing(request)
    except ServiceError as exc:
        return refused(request, exc)
    context = {
        "sandboxes": listing.sandboxes,
        "listing": listing,
        "list_error": list_error,
        "page": _page_of(listing),
        "query": urlencode({k: v for k, v in (("q", listing.query), ("sort", listing.sort)) if v}),
        "columns": _columns(listing.sort, listing.query),
        "usage": usage,
        "form": form,
        "quotas": _quotas(usage),
        **snapshots_context(request),
    }
    # htmx swaps only 2xx answers: the message of a search it sent is shown with a 200.
    if list_error and request.headers.get("HX-Request") != "true":
        status = 400
    return render(request, "web/home.html", context, status=status)


def _listing(request: HttpRequest) -> tuple[SandboxPage, str]:
    """The page of sandboxes ?q=, ?sort= and ?page= ask for; when they are malformed, the
    first page as it comes by default, and why."""
    principal = principal_for(request)
    asked = request.GET
    try:
        found = services.search_sandboxes(
            principal, query=asked.get("q"), sort=asked.get("sort"), page=asked.get("page", 1)
        )
    except InvalidInput as exc:
        return services.search_sandboxes(principal), exc.message
    return found, ""


def _page_of(listing: SandboxPage) -> Page:
    """The listing as a Django page, for templates/web/_pagination.html (the rows are the
    service's page; the paginator only counts)."""
    paginator = Paginator(range(listing.total), listing.per_page)
    return Page(listing.sandboxes, listing.page, paginator)


# Column headers that sort, and the way each sorts first (newest first for creation).
SORTABLE = [("Name", "name"), ("Status", "status"), ("Age", "-created"), ("Expires", "expiry")]


def _columns(sort: str, query: str) -> dict[str, dict[str, str]]:
    """Per sortable column: its link (the other direction when it is the sort) and aria-sort."""
    columns = {}
    for label, first in SORTABLE:
        key = first.lstrip("-")
        if sort.lstrip("-") == key:
            state = "descending" if sort.startswith("-") else "ascending"
            wanted = key if sort.startswith("-") else "-" + key
        else:
            state, wanted = "none", first
        params = {"q": query, "sort": wanted} if query else {"sort": wanted}
        columns[key] = {"label": label, "href": "?" + urlencode(params), "aria_sort": state}
    return columns


def _quotas(usage: TeamUsage) -> list[dict[str, object]]:
    """Bars: running sandboxes against the team's limit; CPUs, memory and disk of the live
    sandboxes against what the limit allows at most (every sandbox at its maximum)."""
    most = usage.max_running
    rows = [
        ("Running sandboxes", usage.running, most, f"{usage.running} of {most}"),
        (
            "Paused sandboxes",
            usage.paused,
            usage.max_paused,
            f"{usage.paused} of {usage.max_paused}",
        ),
        (
            "Stopped sandboxes",
            usage.stopped,
            usage.max_stopped,
            f"{usage.stopped} of {usage.max_stopped}",
        ),
        (
            "CPUs",
            usage.cpus_in_use,
            most * usage.max_cpus_per_sandbox,
            f"{usage.cpus_in_use:g} (at most {usage.max_cpus_per_sandbox:g} per sandbox)",
        ),
        (
            "Memory",
            usage.memory_mb_in_use,
            most * usage.max_memory_mb_per_sandbox,
            f"{usage.memory_mb_in_use} MB (at most {usage.max_memory_mb_per_sandbox} MB each)",
        ),
        (
            "Disk",
            usage.disk_mb_in_use,
            most * usage.max_disk_mb_per_sandbox,
            f"{usage.disk_mb_in_use} MB (at most {usage.max_disk_mb_per_sandbox} MB each)",
        ),
        (
            "Snapshots",
            usage.snapshots,
            usage.max_snapshots,
            f"{usage.snapshots} of {usage.max_snapshots}",
        ),
        (
            "Snapshot storage",
            usage.snapshot_mb,
            usage.max_snapshot_mb,
            f"{usage.snapshot_mb:g} MB of {usage.max_snapshot_mb} MB",
        ),
    ]
    return [
        {"label": label, "text": text, "percent": _percent(used, limit)}
        for label, used, limit, text in rows
    ]


def _percent(used: float, limit: float) -> int:
    return 0 if limit <= 0 else max(0, min(100, round(100 * used / limit)))
