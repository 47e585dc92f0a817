"""Admin for the product: sandboxes (delete through the service), the command history, the
warm pool, previews and links (read-only)."""

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
from sandboxes.contract.errors import InvalidInput
from sandboxes.models import (
    AccessLink,
    CommandExecution,
    CommandStatus,
    Preview,
    Sandbox,
    SandboxStatus,
    WarmContainer,
)
from tenants.admin import ReadOnlyAdminMixin, admin_principal, pretty_json

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
]


@admin.register(Sandbox)
class SandboxAdmin(admin.ModelAdmin):
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
        ("State", {"fields": ["status", "status_message", "command_history"]}),
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
                    "deleted_at",
                ]
            },
        ),
        ("Backend", {"fields": ["backend_state_pretty"], "classes": ["collapse"]}),
    ]
    # Same name as Django's bulk delete, so it replaces it: a sandbox is deleted through the
    # service (container and workspace removed, audited) and its row stays as history.
    actions = ["delete_selected"]

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


@admin.register(CommandExecution)
class CommandExecutionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "created_at",
        "sandbox",
        "actor",
        "channel",
        "kind",
        "short_command",
        "status",
        "exit_code",
        "duration_seconds",
        "background",
    ]
    list_filter = ["status", "channel", "kind", "background", "created_at"]
    search_fields = ["command", "sandbox__public_id", "actor__username"]
    date_hierarchy = "created_at"
    list_select_related = ["sandbox", "actor"]
    fieldsets = [
        (None, {"fields": ["sandbox", "actor", "channel", "kind", "background"]}),
        ("Command", {"fields": ["command_pretty", "cwd", "timeout_seconds"]}),
        (
            "Result",
            {
                "fields": [
                    "status",
                    "exit_code",
                    "error_message",
                    "stdout_pretty",
                    "stdout_bytes",
                    "stdout_truncated",
                    "stderr_pretty",
                    "stderr_bytes",
                    "stderr_truncated",
                ]
            },
        ),
        (
            "Times",
            {"fields": ["created_at", "started_at", "finished_at", "duration_seconds"]},
        ),
        # Background commands only: the job in the sandbox (its log path) and the lease of
        # the worker supervising it (sandboxes/tasks.py).
        ("Background", {"fields": ["background_state_pretty"]}),
    ]
    readonly_fields = [str(field) for _, options in fieldsets for field in options["fields"]]
    # History stays read-only; cancelling a background command goes through the service
    # (processes killed in the sandbox, the end recorded, audited).
    actions = ["cancel_background"]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or not obj.background:
            return [entry for entry in fieldsets if entry[0] != "Background"]
        return fieldsets

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        # The rows are never edited here; Django's "change command execution" permission
        # grants cancelling background commands through the service.
        return request.user.has_perm("sandboxes.change_commandexecution")

    @admin.action(description="Cancel selected background commands", permissions=["cancel"])
    def cancel_background(self, request: HttpRequest, queryset: QuerySet[CommandExecution]) -> None:
        apply_each(
            self, request, queryset.select_related("sandbox__team"), self._cancel_one(request)
        )

    def _cancel_one(self, request: HttpRequest):
        def call(execution: CommandExecution) -> str:
            sandbox = execution.sandbox
            label = f"command {execution.pk} in {sandbox.public_id}"
            if not execution.background:
                raise InvalidInput(f"{label} is not a background command; it cannot be cancelled")
            if execution.status not in (CommandStatus.QUEUED, CommandStatus.RUNNING):
                return f"{label}: already {execution.status}"
            # The sandbox's team on the principal files the audit row under that team.
            principal = admin_principal(request, team=sandbox.team)
            check = services.cancel_background(principal, sandbox.public_id, execution.pk)
            if check.status == CommandStatus.CANCELLED:
                return f"{label}: cancelled"
            return f"{label}: had already ended ({check.status})"

        return call

    @admin.display(description="background state")
    def background_state_pretty(self, execution: CommandExecution) -> str:
        return pretty_json(execution.background_state)

    @admin.display(description="command")
    def short_command(self, execution: CommandExecution) -> str:
        text = execution.command
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.display(description="command")
    def command_pretty(self, execution: CommandExecution) -> str:
        return _pre(execution.command)

    @admin.display(description="stdout")
    def stdout_pretty(self, execution: CommandExecution) -> str:
        return _pre(execution.stdout)

    @admin.display(description="stderr")
    def stderr_pretty(self, execution: CommandExecution) -> str:
        return _pre(execution.stderr)


def _pre(text: str) -> str:
    # Output keeps its line breaks and is escaped: it is whatever a sandbox printed. Classes
    # of static/web/admin.css (the Content-Security-Policy blocks style attributes).
    return format_html("<pre class='sandhub-pre sandhub-output'>{}</pre>", text)


@admin.register(WarmContainer)
class WarmContainerAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The warm pool, read-only: members are started, claimed and removed by the pool tasks
    (size per image: Image.warm_pool_size)."""

    list_display = ["pool_id", "host", "image", "slot", "status", "sandbox", "created_at"]
    list_filter = ["status", "host", "image"]
    search_fields = ["pool_id", "sandbox__public_id", "host__name"]
    list_select_related = ["host", "image", "sandbox"]
    fields = (
        "pool_id",
        "host",
        "image",
        "slot",
        "status",
        "sandbox",
        "backend_state",
        "created_at",
        "ready_at",
        "claimed_at",
    )
    readonly_fields = fields


@admin.register(Preview)
class PreviewAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Previews, read-only: opened and stopped through the services (deploy_app,
    get_preview_url, stop_app), which authorize and audit each."""

    list_display = [
        "id",
        "sandbox",
        "port",
        "public",
        "created_by",
        "created_at",
        "stopped_at",
        "stop_reason",
        "command",
    ]
    list_filter = ["public", "created_at", ("stopped_at", admin.EmptyFieldListFilter)]
    search_fields = ["sandbox__public_id", "created_by__username", "port"]
    date_hierarchy = "created_at"
    list_select_related = ["sandbox", "created_by", "command"]
    fields = (
        "sandbox",
        "port",
        "public",
        "created_by",
        "created_at",
        "stopped_at",
        "stop_reason",
        "command",
    )
    readonly_fields = fields


@admin.register(AccessLink)
class AccessLinkAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """File links and preview tokens, read-only: made, listed and revoked through the
    services (create_file_link, get_preview_url, revoke_link), which authorize and audit
    each. The secret is not kept (nor shown: its hash opens nothing)."""

    list_display = [
        "public_id",
        "kind",
        "sandbox",
        "target",
        "created_by",
        "min_role",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["kind", "min_role", "created_at", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["public_id", "sandbox__public_id", "created_by__username", "path"]
    date_hierarchy = "created_at"
    list_select_related = ["sandbox", "created_by"]
    fields = (
        "public_id",
        "kind",
        "sandbox",
        "path",
        "preview",
        "port",
        "membership",
        "created_by",
        "min_role",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    )
    readonly_fields = fields

    @admin.display(description="opens")
    def target(self, link: AccessLink) -> str:
        return link.path if link.kind == "file" else f"port {link.port}"
