"""Admin actions that pin an SSH host's key: fetch what each host presents, then confirm it on
a page that shows every fingerprint (compare it with `ssh-keygen -lf` run on the host). The
page posts back the fingerprints it showed, so what gets pinned is what the admin saw."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from hosts.admin.actions import apply_each
from hosts.models import Host
from sandboxes import services
from sandboxes.contract.results import HostKeyInfo
from tenants.admin import admin_principal

CONFIRM_TEMPLATE = "admin/hosts/confirm_host_keys.html"


def _describe(info: HostKeyInfo) -> str:
    state = "pinned" if info.confirmed else "not confirmed yet"
    return f"{info.host}: {info.key_type} {info.fingerprint} ({state})"


@admin.action(
    description="Fetch host keys (SSH): show each host's fingerprint", permissions=["change"]
)
def fetch_host_keys(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Host]
) -> None:
    principal = admin_principal(request)
    apply_each(
        modeladmin,
        request,
        queryset,
        lambda host: _describe(services.fetch_host_key(principal, host.pk)),
    )


@admin.action(description="Confirm host keys (SSH) after comparing them", permissions=["change"])
def confirm_host_keys(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Host]
) -> TemplateResponse | None:
    if request.POST.get("confirm") != "yes":
        return TemplateResponse(
            request,
            CONFIRM_TEMPLATE,
            {
                **modeladmin.admin_site.each_context(request),
                "title": "Confirm SSH host keys",
                "opts": modeladmin.model._meta,
                "hosts": list(queryset),
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            },
        )
    principal = admin_principal(request)

    def confirm(host: Host) -> str:
        shown = request.POST.get(f"fingerprint-{host.pk}", "")
        return _describe(services.confirm_host_key(principal, host.pk, shown))

    apply_each(modeladmin, request, queryset, confirm)
    return None
