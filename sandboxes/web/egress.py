"""The egress policy on the pages: the team's Network tab (the allow-list, which team owners
and admins edit, the ranges an administrator allowed, read-only; the secrets bound to
destinations, whose values are never shown), the modes the create form offers, and the
sandbox page's Network section (its mode, allow-list and refused connections).

Any member may open the Network tab (its secrets are theirs to add too); the services decide
who may change what."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.web.common import attach_error, refused
from sandboxes.web.egress_forms import MODES, AllowlistForm, SecretForm
from sandboxes.web.principal import identity_for, principal_for, team_required
from tenants.principal import Principal

ALLOWLIST_FIELDS = {"allowlist": "allowlist"}
SECRET_FIELDS = {
    "name": "name",
    "host": "hosts",
    "header": "header",
    "template": "template",
    "value": "value",
}


def network_modes(principal: Principal, allow_network: bool) -> tuple[str, ...]:
    """The modes the create form offers, least first ("off" alone: no control at all)."""
    if not allow_network:
        return ("off",)
    allowed = set(services.get_team_egress(principal).modes) | {"off"}
    return tuple(mode for mode in MODES if mode in allowed)


def sandbox_network(request: HttpRequest, sandbox_id: str) -> dict[str, Any]:
    """The sandbox page's Network section: its network log, or why there is none."""
    try:
        return {"network_log": services.network_log(principal_for(request), sandbox_id)}
    except ServiceError as exc:
        return {"network_log": None, "network_error": exc.message}


@team_required
@require_GET
def network(request: HttpRequest) -> HttpResponse:
    return _page(request)


@team_required
@require_POST
def save_allowlist(request: HttpRequest) -> HttpResponse:
    form = AllowlistForm(request.POST)
    status = 400
    if form.is_valid():
        try:
            services.set_team_egress(principal_for(request), allowlist=form.rules())
        except ServiceError as exc:
            if exc.http_status in (403, 404):
                return refused(request, exc)
            attach_error(form, exc, ALLOWLIST_FIELDS)
            status = exc.http_status
        else:
            messages.success(request, "The team's network policy is saved.")
            return redirect("web:team-network")
    return _page(request, allowlist_form=form, status=status)


@team_required
@require_POST
def add_secret(request: HttpRequest) -> HttpResponse:
    form = SecretForm(request.POST, team_wide=identity_for(request).can_manage)
    status = 400
    if form.is_valid():
        data = form.cleaned_data
        try:
            added = services.add_secret(
                principal_for(request),
                name=data["name"],
                hosts=form.hosts_list(),
                value=data["value"],
                header=data["header"],
                template=data["template"],
                team_wide=bool(data.get("team_wide")),
            )
        except ServiceError as exc:
            if exc.http_status in (403, 404):
                return refused(request, exc)
            attach_error(form, exc, SECRET_FIELDS)
            status = exc.http_status
        else:
            messages.success(request, f"Secret {added.name} is stored; its value is not shown.")
            return redirect("web:team-network")
    return _page(request, secret_form=form, status=status)


@team_required
@require_POST
def delete_secret(request: HttpRequest, secret_id: int) -> HttpResponse:
    try:
        services.delete_secret(principal_for(request), secret_id)
    except ServiceError as exc:
        return refused(request, exc)
    messages.success(request, "The secret was deleted.")
    return redirect("web:team-network")


def _page(
    request: HttpRequest,
    *,
    allowlist_form: AllowlistForm | None = None,
    secret_form: SecretForm | None = None,
    status: int = 200,
) -> HttpResponse:
    principal = principal_for(request)
    identity = identity_for(request)
    try:
        policy = services.get_team_egress(principal)
        secrets = services.list_secrets(principal)
    except ServiceError as exc:
        return refused(request, exc)
    initial = {"allowlist": "\n".join(policy.allowlist)}
    context = {
        "tab": "network",
        "policy": policy,
        "secrets": secrets,
        "can_manage": identity.can_manage,
        "allowlist_form": allowlist_form or AllowlistForm(initial=initial),
        "secret_form": secret_form or SecretForm(team_wide=identity.can_manage),
    }
    return render(request, "web/team/network.html", context, status=status)
