"""Admin of the egress policy: secrets bound to destinations (the value write-only: typed in
a password field, encrypted and stored by the service, never shown), the connections the
proxy refused (read-only, and a table on the sandbox's page), and the deployment's CA
(read-only: its certificate, never its key)."""

from __future__ import annotations

from functools import partial
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.shortcuts import redirect
from django.utils.html import format_html, format_html_join

from sandboxes import services
from sandboxes.models import EgressAuthority, EgressRefusal, EgressSecret, Sandbox
from tenants import audit
from tenants.admin import ReadOnlyAdminMixin, admin_principal, call_service

VALUE_HELP = "The secret itself. Stored encrypted by the service; never shown again, anywhere."
SECRET_FIELDS = ("team", "user", "name", "hosts", "header", "template")


class EgressSecretForm(forms.ModelForm):
    value = forms.CharField(
        strip=False,
        max_length=8192,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=VALUE_HELP,
        error_messages={"required": "A new secret needs its value."},
    )

    class Meta:
        model = EgressSecret
        fields = ["team", "name", "hosts", "header", "template"]


@admin.register(EgressSecret)
class EgressSecretAdmin(admin.ModelAdmin):
    """Secrets: a team-wide one is added here, and deleted, through the services (authorized,
    audited, the value encrypted there); a member adds an own one on the team's Network page.
    The value is a form field of its own, never a column; a stored secret is not edited
    (delete it and add it anew)."""

    form = EgressSecretForm
    list_display = ["name", "team", "user", "hosts_text", "header", "created_by", "created_at"]
    list_filter = ["team", "header", "created_at"]
    search_fields = ["name", "team__slug", "user__username"]
    list_select_related = ["team", "user", "created_by"]
    autocomplete_fields = ["team"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["team", "name", "hosts", "header", "template", "value"]
        return [*SECRET_FIELDS, "placeholder", "created_by", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [] if obj is None else self.get_fields(request, obj)

    @admin.display(description="hosts")
    def hosts_text(self, secret: EgressSecret) -> str:
        return ", ".join(secret.hosts)

    def save_model(
        self, request: HttpRequest, obj: EgressSecret, form: forms.ModelForm, change: bool
    ) -> None:
        if change:
            return  # nothing on a stored secret's page is editable
        data = form.cleaned_data
        add = partial(
            services.add_secret,
            admin_principal(request, obj.team),
            name=data["name"],
            hosts=data["hosts"],
            value=data["value"],
            header=data["header"],
            template=data["template"],
            team_wide=True,
        )
        stored = call_service(self, request, add)
        if stored is not None:
            obj.pk = stored.id
            obj._state.adding = False

    def response_add(self, request: HttpRequest, obj: EgressSecret, *args: Any) -> Any:
        if obj.pk is None:  # the service refused: its message is shown on the list
            return redirect("admin:sandboxes_egresssecret_changelist")
        return super().response_add(request, obj, *args)

    def delete_model(self, request: HttpRequest, obj: EgressSecret) -> None:
        principal = admin_principal(request, obj.team)
        if obj.user_id is None:
            call_service(self, request, services.delete_secret, principal, obj.pk)
            return
        # A member's own secret is not the service's to show a platform admin: deleted
        # here, with the audit row the service would have written.
        audit.record(
            principal,
            "egress.secret.delete",
            target_type="secret",
            target_id=str(obj.pk),
            details={"name": obj.name, "team_wide": False, "user": str(obj.user)},
        )
        obj.delete()

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for secret in queryset.select_related("team", "user"):
            self.delete_model(request, secret)


_REFUSAL_FIELDS = ("sandbox", "destination", "reason", "count", "first_at", "last_at")


@admin.register(EgressRefusal)
class EgressRefusalAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Refused connections, counted per sandbox, destination and reason (by the proxy)."""

    list_display = list(_REFUSAL_FIELDS)
    list_filter = ["reason", "last_at"]
    search_fields = ["sandbox__public_id", "destination", "reason"]
    date_hierarchy = "last_at"
    list_select_related = ["sandbox"]
    fields = _REFUSAL_FIELDS
    readonly_fields = _REFUSAL_FIELDS


def refusals_table(sandbox: Sandbox, limit: int = 50) -> str:
    """The sandbox's refused connections, the most refused first, as a table for its change
    page (a read-only field rather than an inline: the page's form stays as it was)."""
    rows = EgressRefusal.objects.filter(sandbox=sandbox).order_by("-count", "destination")
    cells = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        ((r.destination, r.reason, r.count, r.last_at) for r in rows[:limit]),
    )
    if not cells:
        return "none"
    return format_html(
        "<table><thead><tr><th scope='col'>destination</th><th scope='col'>reason</th>"
        "<th scope='col'>count</th><th scope='col'>last seen</th></tr></thead>"
        "<tbody>{}</tbody></table>",
        cells,
    )


@admin.register(EgressAuthority)
class EgressAuthorityAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The deployment's CA: made on first use by the services; its key is never shown."""

    list_display = ["name", "created_at"]
    fields = ("name", "cert_pem", "created_at")
    readonly_fields = fields
