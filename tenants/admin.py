"""Admin for identity and access: teams with their members and quotas, the audit log."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from tenants.models import AuditLog, Channel, Membership, Team
from tenants.principal import Principal


def admin_principal(request: HttpRequest, team: Team | None = None) -> Principal:
    """The signed-in staff user acting through admin: services treat it as a platform admin.

    `team` only labels the audit row (e.g. the team whose sandbox is deleted).
    """
    return Principal(
        user=request.user,
        team=team,
        channel=Channel.ADMIN,
        source_address=_client_address(request),
    )


def _client_address(request: HttpRequest) -> str | None:
    # The audit column is an IP address (inet on PostgreSQL): anything else is left out.
    address = request.META.get("REMOTE_ADDR") or ""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


class ReadOnlyAdminMixin:
    """History is viewable but never added, edited or deleted, not even by a superuser.

    Without change permission Django renders the change page read-only and refuses a POST to
    it (403); without delete permission the bulk "delete selected" action disappears too.
    """

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def pretty_json(value: Any) -> str:
    """JSON as an indented, escaped <pre> block, readable in a change page."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html("<pre style='margin: 0; white-space: pre-wrap'>{}</pre>", text)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "name",
        "member_count",
        "max_running_sandboxes",
        "max_cpus_per_sandbox",
        "max_memory_mb_per_sandbox",
        "max_lifetime_minutes",
        "allow_network",
        "created_at",
    ]
    list_filter = ["allow_network", "created_at"]
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
                    "max_cpus_per_sandbox",
                    "max_memory_mb_per_sandbox",
                    "allow_network",
                ]
            },
        ),
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
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Team]:
        # One query for the member counts instead of one per row.
        return super().get_queryset(request).annotate(_member_count=Count("memberships"))

    @admin.display(description="members", ordering="_member_count")
    def member_count(self, team: Team) -> int:
        return team._member_count


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role", "created_at"]
    list_filter = ["role", "team"]
    search_fields = ["user__username", "user__email", "team__slug", "team__name"]
    autocomplete_fields = ["user", "team"]
    readonly_fields = ["created_at"]
    list_select_related = ["user", "team"]


@admin.register(AuditLog)
class AuditLogAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "created_at",
        "channel",
        "action",
        "outcome",
        "actor",
        "team",
        "target_type",
        "target_id",
        "source_address",
    ]
    list_filter = ["channel", "outcome", "action", "target_type", "team", "created_at"]
    search_fields = [
        "action",
        "target_id",
        "actor__username",
        "team__slug",
        "source_address",
    ]
    date_hierarchy = "created_at"
    list_select_related = ["actor", "team"]
    fields = [
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
    ]
    readonly_fields = fields

    @admin.display(description="details")
    def details_pretty(self, entry: AuditLog) -> str:
        return pretty_json(entry.details)


# --- API keys --------------------------------------------------------------------------------
# ApiKeyAdmin (list, create showing the key once, revoke) lives in its own module and
# registers itself on import.
from tenants import admin_apikeys  # noqa: E402, F401
