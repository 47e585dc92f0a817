"""The team's egress fields on its admin page: the most network a sandbox may have, its
allow-list, and the private ranges it may reach anyway. A change goes through the services
(authorized, validated, audited) rather than into the row directly.

Here rather than in __init__.py, which holds the rest of the team's page."""

from __future__ import annotations

import ipaddress
from functools import partial
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from sandboxes import services
from tenants.admin.base import admin_principal, call_service
from tenants.models import Team

EGRESS_FIELDS = ("egress_max_mode", "egress_allowlist", "egress_allowed_ranges")
EGRESS_FIELDSET: Any = (  # a fieldset of TeamAdmin
    "Network (egress)",
    {
        "fields": list(EGRESS_FIELDS),
        "description": "Sandboxes reach the network only through the platform's egress proxy "
        "(and only when network is allowed above).",
    },
)
RANGES_HELP = (
    'A JSON list of CIDR ranges, e.g. ["10.20.0.0/16"]. Private, loopback, link-local and '
    "the platform's own addresses are refused to every sandbox by default. Allowing a range "
    "lets every sandbox of this team with network (allow-list or public) connect to every "
    "machine in it, on any port the proxy passes: databases, internal services, the cloud's "
    "metadata address if it is inside. Allow only ranges meant for this team."
)
ALLOWLIST_HELP = (
    'A JSON list of rules, e.g. ["pypi.org", "*.pythonhosted.org:443", "github.com:22,443"]: '
    "the names (and ports; default 80 and 443) a sandbox in allow-list mode may reach. Team "
    "owners and admins change it on the team's Network page too."
)


def egress_help(db_field: Any, formfield: forms.Field | None) -> forms.Field | None:
    """The help an administrator needs beside each egress field."""
    texts = {"egress_allowed_ranges": RANGES_HELP, "egress_allowlist": ALLOWLIST_HELP}
    if formfield is not None and db_field.name in texts:
        formfield.help_text = texts[db_field.name]
    if formfield is not None and db_field.name == "egress_allowed_ranges":
        formfield.validators.append(valid_ranges)
    return formfield


def keep_stored_egress(team: Team, form: forms.ModelForm) -> dict[str, Any]:
    """What the form asks for the allow-list and the most mode; the team keeps its stored
    values until the service applies the change (save_egress)."""
    asked = {
        name: form.cleaned_data[name]
        for name in ("egress_max_mode", "egress_allowlist", "egress_allowed_ranges")
        if name in form.changed_data
    }
    for name in asked:
        setattr(team, name, form.initial.get(name))
    return asked


def save_egress(
    model_admin: admin.ModelAdmin, request: HttpRequest, team: Team, asked: dict[str, Any]
) -> None:
    """Apply the changed allow-list, most mode and ranges through the service (validated,
    audited); a refusal is shown as a message and changes nothing."""
    if not asked:
        return
    change = partial(
        services.set_team_egress,
        admin_principal(request, team),
        allowlist=asked.get("egress_allowlist"),
        max_mode=asked.get("egress_max_mode"),
        allowed_ranges=asked.get("egress_allowed_ranges"),
    )
    call_service(model_admin, request, change)


def valid_ranges(value: Any) -> None:
    """The allowed ranges: a list of CIDR networks (host bits clear)."""
    if not isinstance(value, list):
        raise forms.ValidationError('A JSON list of CIDR ranges, e.g. ["10.20.0.0/16"].')
    for text in value:
        try:
            ipaddress.ip_network(str(text), strict=True)
        except ValueError as exc:
            raise forms.ValidationError(f"{text!r} is not a CIDR range: {exc}") from exc
