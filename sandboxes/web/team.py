"""Team (owners and admins): members and roles, the team's audit log and its command history
across sandboxes. The services refuse everyone else; the nav shows the page only to them."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes.contract.errors import ServiceError
from sandboxes.services import team as team_services
from sandboxes.web.common import attach_error, paginate, query_without_page, refused
from sandboxes.web.forms import AddMemberForm, AuditFilterForm, CommandFilterForm, RoleForm
from sandboxes.web.principal import principal_for, team_required
from tenants.models import Role

MEMBER_FIELDS = {"role": "role", "owner": "role", "user": "username", "member": "username"}


@team_required
@require_GET
def members(request: HttpRequest) -> HttpResponse:
    return _members_page(request, AddMemberForm())


@team_required
@require_POST
def add_member(request: HttpRequest) -> HttpResponse:
    form = AddMemberForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            added = team_services.add_member_by_username(
                principal_for(request), form.cleaned_data["username"], form.cleaned_data["role"]
            )
        except ServiceError as exc:
            attach_error(form, exc, MEMBER_FIELDS)
            status = exc.http_status
        else:
            messages.success(request, f"{added.user.get_username()} is now {added.role}.")
            return redirect("web:team")
    return _members_page(request, form, status)


@team_required
@require_POST
def change_role(request: HttpRequest, membership_id: int) -> HttpResponse:
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Choose one of the roles: {', '.join(Role.values)}.")
        return redirect("web:team")
    try:
        changed = team_services.change_member_role(
            principal_for(request), membership_id, form.cleaned_data["role"]
        )
    except ServiceError as exc:
        return refused(request, exc)
    messages.success(request, f"{changed.user.get_username()} is now {changed.role}.")
    return redirect("web:team")


@team_required
@require_POST
def remove_member(request: HttpRequest, membership_id: int) -> HttpResponse:
    try:
        team_services.remove_member_by_id(principal_for(request), membership_id)
    except ServiceError as exc:
        return refused(request, exc)
    messages.success(request, "The member was removed from the team.")
    return redirect("web:team")


def _members_page(request: HttpRequest, form: AddMemberForm, status: int = 200) -> HttpResponse:
    try:
        rows = team_services.list_members(principal_for(request))
    except ServiceError as exc:
        return refused(request, exc)
    context = {"members": rows, "form": form, "roles": Role.choices, "tab": "members"}
    return render(request, "web/team/members.html", context, status=status)


@team_required
@require_GET
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    filters = form.cleaned_data if form.is_valid() else {}
    try:
        rows = team_services.team_audit_log(
            principal_for(request),
            actor=filters.get("actor", ""),
            action=filters.get("action", ""),
            channel=filters.get("channel", ""),
            kind=filters.get("kind", ""),
            since=filters.get("since"),
            until=filters.get("until"),
        )
    except ServiceError as exc:
        return refused(request, exc)
    context = {
        "form": form,
        "page": paginate(request, rows),
        "query": query_without_page(request),
        "tab": "audit",
    }
    return render(request, "web/team/audit.html", context, status=200 if form.is_valid() else 400)


@team_required
@require_GET
def commands(request: HttpRequest) -> HttpResponse:
    form = CommandFilterForm(request.GET)
    status = form.cleaned_data.get("status", "") if form.is_valid() else ""
    try:
        rows = team_services.team_commands(principal_for(request), status=status)
    except ServiceError as exc:
        return refused(request, exc)
    context = {
        "form": form,
        "page": paginate(request, rows),
        "query": query_without_page(request),
        "tab": "commands",
    }
    return render(
        request, "web/team/commands.html", context, status=200 if form.is_valid() else 400
    )
