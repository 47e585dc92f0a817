"""Admin for API keys: list, create (the key is shown once, in a message), revoke.

The stored hash is never displayed; a key cannot be changed to act for another user or team,
only renamed, given another expiry, or revoked. Registered from tenants/admin.py.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from tenants import apikeys, audit
from tenants.models import ApiKey, ApiKeyScope, Channel, Membership
from tenants.principal import Principal


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
        data = super().clean()
        user, team = data.get("user"), data.get("team")
        member = user and team and Membership.objects.filter(user=user, team=team).exists()
        if self.instance.pk is None and user and team and not member:
            raise forms.ValidationError(f"{user} is not a member of team {team}.")
        return data


def _principal(request: HttpRequest, key: ApiKey) -> Principal:
    return Principal(
        user=request.user,
        team=key.team,
        channel=Channel.ADMIN,
        source_address=apikeys.clean_address(request.META.get("REMOTE_ADDR")),
    )


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

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        if obj is None:
            return ["user", "team", "name", "scopes", "expires_at"]
        return [
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
            "selected_sandbox",
        ]

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
            "selected_sandbox",
        ]

    def get_form(self, request: HttpRequest, obj: ApiKey | None = None, **kwargs: Any):
        if obj is not None:
            # Editing: a plain form over the few editable fields (no scopes, no owner).
            kwargs["form"] = forms.ModelForm
        return super().get_form(request, obj, **kwargs)

    @admin.display(description="key", ordering="prefix")
    def key_prefix(self, key: ApiKey) -> str:
        return f"shk_{key.prefix}_…"

    @admin.display(description="scopes")
    def scope_list(self, key: ApiKey) -> str:
        return ", ".join(key.scopes)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool):
        if change:
            if "revoked" in form.changed_data and obj.revoked:
                obj.revoked_at = timezone.now()
                audit.record(
                    _principal(request, obj),
                    "apikey.revoke",
                    target_type="apikey",
                    target_id=obj.prefix,
                )
            obj.save()
            return
        data = form.cleaned_data
        new = apikeys.create_key(
            data["user"],
            data["team"],
            name=data.get("name") or "",
            scopes=data["scopes"],
            expires_at=data.get("expires_at"),
        )
        # The admin goes on with `obj` (log entry, redirect): make it the row just created.
        obj.pk, obj.prefix, obj.created_at = new.key.pk, new.key.prefix, new.key.created_at
        obj.scopes = new.key.scopes
        obj._state.adding = False
        audit.record(
            _principal(request, new.key),
            "apikey.create",
            target_type="apikey",
            target_id=new.key.prefix,
            details={"user": str(new.key.user), "scopes": new.key.scopes},
        )
        self.message_user(
            request,
            f"The new API key is {new.plaintext} — copy it now: it is shown only this once "
            "and cannot be recovered (only its hash is kept).",
            messages.WARNING,
        )

    @admin.action(description="Revoke the selected API keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = 0
        for key in queryset.select_related("team").filter(revoked=False):
            apikeys.revoke(key)
            audit.record(
                _principal(request, key),
                "apikey.revoke",
                target_type="apikey",
                target_id=key.prefix,
            )
            count += 1
        self.message_user(request, f"Revoked {count} API key(s).", messages.SUCCESS)
