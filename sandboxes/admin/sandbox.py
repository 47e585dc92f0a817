"""Admin of sandboxes: read, rename, delete (and pause, resume, stop: lifecycle.py) through
the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from hosts.admin.actions import apply_each
from sandboxes import services
from sandboxes.admin.lifecycle import LIFECYCLE_ACTIONS, LifecycleActions
from sandboxes.models import (
    Sandbox,
    SandboxStatus,
)
from tenants.admin import admin_principal, pretty_json

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
]


@admin.register(Sandbox)
class SandboxAdmin(LifecycleActions, admin.ModelAdmin):
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
    # Same name as Django's bulk delete, so it replaces it: a sandbox is deleted through the
    # service (container and workspace removed, audited) and its row stays as history.
    actions = ["delete_selected", *LIFECYCLE_ACTIONS]

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

    def has_destroy_permission(self, request: HttpRequest) -> bool:
        # Django's "delete sandbox" permission grants deleting through the service.
        return request.user.has_perm("sandboxes.delete_sandbox")

    @admin.action(description="Delete selected sandboxes", permissions=["destroy"])
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[Sandbox]
    ) -> TemplateResponse | None:
        if not request.POST.get("post"):
            return self._confirm_delete(request, queryset)
        apply_each(self, request, queryset.select_related("team"), self._delete_one(request))
        return None

    def _delete_one(self, request: HttpRequest):
        def call(sandbox: Sandbox) -> str:
            if sandbox.status == SandboxStatus.DELETED:
                return f"{sandbox}: already deleted"
            # The sandbox's team on the principal files the audit row under that team.
            principal = admin_principal(request, team=sandbox.team)
            services.delete_sandbox(principal, sandbox.public_id)
            return f"{sandbox}: deleted"

        return call

    def _confirm_delete(
        self, request: HttpRequest, queryset: QuerySet[Sandbox]
    ) -> TemplateResponse:
        """Django's own bulk-delete confirmation page, told what is really removed."""
        count = queryset.count()
        context = {
            **self.admin_site.each_context(request),
            "title": "Delete sandboxes",
            "subtitle": "Their containers and workspaces are destroyed; the records and "
            "command history stay.",
            "objects_name": "sandboxes" if count != 1 else "sandbox",
            "deletable_objects": [[f"{s} ({s.team}, {s.status})" for s in queryset]],
            "model_count": {"sandboxes": count}.items(),
            "queryset": queryset,
            "perms_lacking": False,
            "protected": False,
            "opts": self.opts,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/delete_selected_confirmation.html", context)

    @admin.display(description="env")
    def env_pretty(self, sandbox: Sandbox) -> str:
        return pretty_json(sandbox.env)

    @admin.display(description="backend state")
    def backend_state_pretty(self, sandbox: Sandbox) -> str:
        return pretty_json(sandbox.backend_state)

    @admin.display(description="commands")
    def command_history(self, sandbox: Sandbox) -> str:
        # A link to the filtered history rather than an inline: a sandbox may run thousands.
        url = reverse("admin:sandboxes_commandexecution_changelist")
        count = sandbox.commands.count()
        return format_html(
            "<a href='{}?sandbox__id__exact={}'>{} commands</a>", url, sandbox.pk, count
        )
