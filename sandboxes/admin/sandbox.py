"""Admin of sandboxes: read, rename, delete (and pause, resume, stop: lifecycle.py) through
the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from hosts.admin.usage import UsageChartsAdmin
from sandboxes import services
from sandboxes.admin.deletion import DeleteThroughServiceMixin
from sandboxes.admin.egress import refusals_table
from sandboxes.admin.lifecycle import LIFECYCLE_ACTIONS, LifecycleActions
from sandboxes.models import (
    Sandbox,
)
from sandboxes.web import charts
from tenants.admin import admin_principal, pretty_json
from tenants.principal import Principal

# Everything on the change page but the name is history or owned by the services.
SANDBOX_READONLY_FIELDS = [
    "public_id",
    "team",
    "owner",
    "host",
    "image",
    "status",
    "status_message",
    "cpus",
    "memory_mb",
    "pids_limit",
    "network",
    "egress_mode",
    "egress_allow",
    "refused_connections",
    "gpus",
    "env_pretty",
    "backend_state_pretty",
    "command_history",
    "created_at",
    "started_at",
    "last_activity_at",
    "expires_at",
    "deleted_at",
    "status_changed_at",
    "lifetime_started_at",
    "lifetime_minutes",
    "usage_charts",
]


@admin.register(Sandbox)
class SandboxAdmin(UsageChartsAdmin, DeleteThroughServiceMixin, LifecycleActions, admin.ModelAdmin):
    list_display = [
        "public_id",
        "name",
        "team",
        "owner",
        "host",
        "image",
        "status",
        "created_at",
        "expires_at",
    ]
    list_filter = ["status", "team", "host", "image", "network", "created_at"]
    search_fields = ["public_id", "name", "owner__username", "team__slug", "host__name"]
    date_hierarchy = "created_at"
    list_select_related = ["team", "owner", "host", "image"]
    readonly_fields = SANDBOX_READONLY_FIELDS
    fieldsets = [
        (None, {"fields": ["public_id", "name", "team", "owner", "host", "image"]}),
        (
            "State",
            {"fields": ["status", "status_message", "status_changed_at", "command_history"]},
        ),
        (
            "Limits",
            {"fields": ["cpus", "memory_mb", "pids_limit", "network", "gpus", "env_pretty"]},
        ),
        ("Network", {"fields": ["egress_mode", "egress_allow", "refused_connections"]}),
        ("Usage", {"fields": ["usage_charts"]}),
        (
            "Times",
            {
                "fields": [
                    "created_at",
                    "started_at",
                    "last_activity_at",
                    "expires_at",
                    "lifetime_started_at",
                    "lifetime_minutes",
                    "deleted_at",
                ]
            },
        ),
        ("Backend", {"fields": ["backend_state_pretty"], "classes": ["collapse"]}),
    ]
    # delete_selected replaces Django's bulk delete (deletion.py).
    actions = ["delete_selected", *LIFECYCLE_ACTIONS]
    delete_permission = "sandboxes.delete_sandbox"
    delete_removes = (
        "each sandbox's container or directory on its host, with its workspace files",
        "its running processes, terminals and open previews",
    )
    delete_keeps = (
        "each sandbox's record, marked deleted",
        "its command history",
        "the audit log",
    )

    def save_model(self, request: HttpRequest, obj: Sandbox, form: Any, change: bool) -> None:
        # Only the name is editable; it changes through the service so it is audited.
        if change and "name" in form.changed_data:
            principal = admin_principal(request, team=obj.team)
            services.rename_sandbox(principal, obj.public_id, form.cleaned_data["name"])

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Creating needs a host, provisioning and a quota check: that is services' job.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Rows are never deleted from the database, not even by a superuser.
        return False

    def delete_through_service(self, principal: Principal, public_id: str) -> None:
        services.delete_sandbox(principal, public_id)

    @admin.display(description="env")
    def env_pretty(self, sandbox: Sandbox) -> str:
        # A stored secret's value given as a variable at create is masked here too.
        return services.mask_secrets(sandbox.team_id, sandbox.owner_id, pretty_json(sandbox.env))

    @admin.display(description="backend state")
    def backend_state_pretty(self, sandbox: Sandbox) -> str:
        return pretty_json(sandbox.backend_state)

    @admin.display(description="last hour")
    def usage_charts(self, sandbox: Sandbox) -> str:
        return self.usage_charts_of(
            lambda request: charts.sandbox_charts(
                services.get_sandbox_metrics(
                    admin_principal(request, team=sandbox.team), sandbox.public_id
                )
            )
        )

    @admin.display(description="refused connections")
    def refused_connections(self, sandbox: Sandbox) -> str:
        return refusals_table(sandbox)

    @admin.display(description="commands")
    def command_history(self, sandbox: Sandbox) -> str:
        # A link to the filtered history rather than an inline: a sandbox may run thousands.
        url = reverse("admin:sandboxes_commandexecution_changelist")
        count = sandbox.commands.count()
        return format_html(
            "<a href='{}?sandbox__id__exact={}'>{} commands</a>", url, sandbox.pk, count
        )
