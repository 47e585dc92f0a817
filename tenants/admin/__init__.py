"""Admin for identity and access: teams with their members and quotas, the audit log.

Memberships are added, re-roled and removed through tenants.services (authorized, audited),
from the team's page as from their own list.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from tenants import services
from tenants.admin.base import (  # re-exported: the other apps' admins import them from here
    ReadOnlyAdminMixin,
    admin_principal,
    call_service,
    pretty_json,
    truncated,
)
from tenants.admin.team_egress import (
    EGRESS_FIELDSET,
    egress_help,
    keep_stored_egress,
    save_egress,
)
from tenants.models import AuditLog, Membership, Team

__all__ = ["ReadOnlyAdminMixin", "admin_principal", "pretty_json", "truncated"]


class MembershipForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ["user", "team", "role"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        # Whose membership it is never changes: that would be a removal and an addition,
        # each its own audited service call. The admin says so instead of guessing.
        if self.instance.pk is not None and "user" in self.changed_data:
            raise forms.ValidationError(
                "A membership cannot be moved to another user: delete it and add a new one."
            )
        return data


def _adopt(obj: Membership, created: Membership) -> None:
    """Make the admin's unsaved `obj` the row the service created (log entry, redirect)."""
    obj.pk, obj.created_at = created.pk, created.created_at
    obj._state.adding = False


class MembershipInline(admin.TabularInline):
    """Edited in the team's page; saved through the services by TeamAdmin.save_formset."""

    model = Membership
    form = MembershipForm
    extra = 0
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    # Fits at 1280 px beside the filters: the per-sandbox limits in one column, the quotas
    # one by one on the change page.
    list_display = [
        "slug",
        "name",
        "member_count",
        "max_running_sandboxes",
        "sandbox_limits",
        "idle_action",
        "allow_network",
        "created_at",
    ]
    list_filter = ["allow_network", "egress_max_mode", "allow_public_previews", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["created_at"]
    inlines = [MembershipInline]
    fieldsets = [
        (None, {"fields": ["slug", "name", "created_at"]}),
        (
            "Quotas",
            {
                "fields": [
                    "max_running_sandboxes",
                    "max_paused_sandboxes",
                    "max_paused_memory_mb",
                    "max_stopped_sandboxes",
                    "max_cpus_per_sandbox",
                    "max_memory_mb_per_sandbox",
                    "max_disk_mb_per_sandbox",
                    "max_snapshots",
                    "max_snapshot_mb",
                    "allow_network",
                ]
            },
        ),
        (
            "Previews",
            {
                "fields": [
                    "allowed_preview_ports",
                    "max_previews_per_sandbox",
                    "allow_public_previews",
                ]
            },
        ),
        EGRESS_FIELDSET,
        ("Audit", {"fields": ["audit_views"]}),
        (
            "Lifetimes (minutes)",
            {
                "fields": [
                    "default_lifetime_minutes",
                    "max_lifetime_minutes",
                    "idle_timeout_minutes",
                ]
            },
        ),
        (
            "Idleness: pause, stop, delete",
            {
                "fields": [
                    "idle_action",
                    "stop_paused_after_hours",
                    "delete_stopped_after_days",
                ]
            },
        ),
    ]

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        return egress_help(db_field, super().formfield_for_dbfield(db_field, request, **kwargs))

    def save_model(self, request: HttpRequest, obj: Team, form: Any, change: bool) -> None:
        # The egress fields of an existing team change through the services (audited).
        asked = keep_stored_egress(obj, form) if change else {}
        super().save_model(request, obj, form, change)
        save_egress(self, request, obj, asked)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Team]:
        # One query for the member counts instead of one per row.
        return super().get_queryset(request).annotate(_member_count=Count("memberships"))

    @admin.display(description="members", ordering="_member_count")
    def member_count(self, team: Team) -> int:
        return team._member_count  # type: ignore[attr-defined]  # the annotation above

    @admin.display(description="per sandbox")
    def sandbox_limits(self, team: Team) -> str:
        return (
            f"{team.max_cpus_per_sandbox:g} CPU · {team.max_memory_mb_per_sandbox} MB · "
            f"{team.max_disk_mb_per_sandbox} MB disk · {team.max_lifetime_minutes} min"
        )

    def save_formset(
        self, request: HttpRequest, form: forms.ModelForm, formset: Any, change: bool
    ) -> None:
        if formset.model is not Membership:
            super().save_formset(request, form, formset, change)
            return
        team = form.instance
        principal = admin_principal(request, team)
        # Sorts the rows into new, changed and deleted (which the change message reads)
        # without saving any: each change is one audited service call.
        formset.save(commit=False)
        # Removals first, so a member removed and added back in one save ends up added.
        for membership in formset.deleted_objects:
            call_service(self, request, services.remove_member, principal, membership)
        for membership, changed in formset.changed_objects:
            if "role" in changed:
                call_service(
                    self, request, services.change_role, principal, membership, membership.role
                )
        for membership in formset.new_objects:
            # Not call_service: the form already refused duplicates, and the admin needs the
            # row; anything else going wrong here is a bug and rolls the whole page back.
            _adopt(
                membership,
                services.add_member(principal, team, membership.user, membership.role),
            )


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role", "created_at"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "user__email", "team__slug", "team__name"]
    autocomplete_fields = ["user", "team"]
    list_select_related = ["user", "team"]
    form = MembershipForm

    def get_readonly_fields(self, request: HttpRequest, obj: Membership | None = None) -> list[str]:
        # Whose membership, and in which team, never changes: delete it and add another.
        return ["created_at"] if obj is None else ["user", "team", "created_at"]

    def save_model(
        self, request: HttpRequest, obj: Membership, form: forms.ModelForm, change: bool
    ) -> None:
        principal = admin_principal(request, obj.team)
        if not change:
            _adopt(obj, services.add_member(principal, obj.team, obj.user, obj.role))
        elif "role" in form.changed_data:
            call_service(self, request, services.change_role, principal, obj, obj.role)

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        call_service(self, request, services.remove_member, admin_principal(request, obj.team), obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        # The bulk "delete selected" action: one audited removal per membership.
        for membership in queryset.select_related("user", "team"):
            self.delete_model(request, membership)


# Shown, never edited: every field of a row is read-only.
_AUDIT_FIELDS = (
    "created_at",
    "actor",
    "team",
    "channel",
    "action",
    "outcome",
    "target_type",
    "target_id",
    "source_address",
    "details_pretty",
)


@admin.register(AuditLog)
class AuditLogAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "created_at",
        "channel",
        "action",
        "kind",
        "outcome",
        "actor",
        "team",
        "target_type",
        "target_id",
        "source_address",
    ]
    # kind first: an auditor looks for the changes (and refusals) among reads and views.
    list_filter = ["kind", "channel", "outcome", "action", "target_type", "team", "created_at"]
    search_fields = [
        "action",
        "target_id",
        "actor__username",
        "team__slug",
        "source_address",
    ]
    date_hierarchy = "created_at"
    list_select_related = ["actor", "team"]
    fields = _AUDIT_FIELDS
    readonly_fields = _AUDIT_FIELDS

    @admin.display(description="details")
    def details_pretty(self, entry: AuditLog) -> str:
        return pretty_json(entry.details)


# --- API keys, users ------------------------------------------------------------------------
# ApiKeyAdmin (list, create showing the key once, revoke) and Django's user admin with the
# user's team memberships inline (users.py) live in their own modules and register on import.
from tenants.admin import apikeys, users  # noqa: E402, F401
