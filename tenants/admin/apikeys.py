"""Admin for API keys: list, create (the key is shown once, in a message), revoke.

The stored hash is never displayed; a key cannot be changed to act for another user or team,
only renamed, given another expiry, or revoked. Every change goes through tenants.services,
which authorizes it and writes its audit row. Registered from tenants/admin.py. A key's MCP
sessions (what each agent selected) are shown read-only: the agents own them.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tenants import apikeys, services
from tenants.admin.base import ReadOnlyAdminMixin, admin_principal, call_service
from tenants.errors import ServiceError
from tenants.models import ApiKey, ApiKeyScope, McpSession


class ApiKeyForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=ApiKeyScope.choices,
        initial=list(apikeys.DEFAULT_SCOPES),
        widget=forms.CheckboxSelectMultiple,
        help_text="write includes read; a key never does more than its user's role allows.",
    )

    class Meta:
        model = ApiKey
        fields = ["user", "team", "name", "scopes", "expires_at"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        user, team = data.get("user"), data.get("team")
        # The same checks the service makes, answered on the form: a refusal raised in
        # save_model could only be a server error.
        if self.instance.pk is None and user and team and data.get("scopes"):
            try:
                apikeys.check_new_key(user, team, data["scopes"], data.get("expires_at"))
            except ServiceError as exc:
                raise forms.ValidationError(exc.message) from exc
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = [
        "key_prefix",
        "name",
        "user",
        "team",
        "scope_list",
        "expires_at",
        "last_used_at",
        "last_used_address",
        "revoked",
        "created_at",
    ]
    list_filter = ["revoked", "team", "created_at"]
    search_fields = ["prefix", "name", "user__username", "team__slug"]
    list_select_related = ["user", "team"]
    autocomplete_fields = ["user", "team"]
    actions = ["revoke_keys"]

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("user", "team", "name", "scopes", "expires_at")
        return (
            "key_prefix",
            "user",
            "team",
            "name",
            "scope_list",
            "expires_at",
            "revoked",
            "revoked_at",
            "created_at",
            "last_used_at",
            "last_used_address",
        )

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        if obj is None:
            return []
        # Revoking is for good: a revoked key is never brought back, a new one is made.
        return ["revoked"] * obj.revoked + [
            "key_prefix",
            "user",
            "team",
            "scope_list",
            "revoked_at",
            "created_at",
            "last_used_at",
            "last_used_address",
        ]

    def get_form(
        self, request: HttpRequest, obj: ApiKey | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is not None:
            # Editing: a plain form over the few editable fields (no scopes, no owner).
            kwargs["form"] = forms.ModelForm
        return super().get_form(request, obj, change, **kwargs)

    @admin.display(description="key", ordering="prefix")
    def key_prefix(self, key: ApiKey) -> str:
        return f"shk_{key.prefix}_…"

    @admin.display(description="scopes")
    def scope_list(self, key: ApiKey) -> str:
        return ", ".join(key.scopes)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool):
        if change:
            self._save_changes(request, obj, form)
            return
        data = form.cleaned_data
        key, plaintext = services.create_api_key(
            admin_principal(request, data["team"]),
            data["user"],
            data["team"],
            data.get("name") or "",
            data["scopes"],
            data.get("expires_at"),
        )
        # The admin goes on with `obj` (log entry, redirect): make it the row just created.
        obj.pk, obj.prefix, obj.created_at = key.pk, key.prefix, key.created_at
        obj.scopes = key.scopes
        obj._state.adding = False
        self.message_user(
            request,
            f"The new API key is {plaintext} — copy it now: it is shown only this once "
            "and cannot be recovered (only its hash is kept).",
            messages.WARNING,
        )

    def _save_changes(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm) -> None:
        # `obj` already holds the form's values; the services read the row afresh and change
        # it themselves, one audited call per kind of change.
        principal = admin_principal(request, obj.team)
        key = ApiKey.objects.select_related("user", "team").get(pk=obj.pk)
        if {"name", "expires_at"} & set(form.changed_data):
            call_service(
                self, request, services.update_api_key, principal, key, obj.name, obj.expires_at
            )
        if "revoked" in form.changed_data and obj.revoked:
            call_service(self, request, services.revoke_api_key, principal, key)
        obj.name, obj.expires_at = key.name, key.expires_at
        obj.revoked, obj.revoked_at = key.revoked, key.revoked_at

    def delete_model(self, request: HttpRequest, obj: ApiKey) -> None:
        call_service(
            self, request, services.delete_api_key, admin_principal(request, obj.team), obj
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for key in queryset.select_related("user", "team"):
            self.delete_model(request, key)

    @admin.action(description="Revoke the selected API keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = 0
        for key in queryset.select_related("user", "team").filter(revoked=False):
            principal = admin_principal(request, key.team)
            if call_service(self, request, services.revoke_api_key, principal, key) is not None:
                count += 1
        self.message_user(request, f"Revoked {count} API key(s).", messages.SUCCESS)


@admin.register(McpSession)
class McpSessionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Which sandbox each MCP session of a key selected, until when (never the session id:
    only its digest is stored, and that is not shown either)."""

    list_display = ["key", "selected_sandbox", "created_at", "expires_at"]
    list_filter = ["key__team", "expires_at"]
    search_fields = ["key__prefix", "key__name", "key__user__username", "selected_sandbox"]
    list_select_related = ["key"]
    fields = ("key", "selected_sandbox", "created_at", "expires_at")
    readonly_fields = fields
