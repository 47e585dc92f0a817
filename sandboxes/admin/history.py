"""Admin of the command history (read-only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from hosts.admin.actions import apply_each
from sandboxes import services
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.formatting import human_duration
from sandboxes.models import (
    CommandExecution,
    CommandStatus,
)
from tenants.admin import ReadOnlyAdminMixin, admin_principal, pretty_json, truncated


@admin.register(CommandExecution)
class CommandExecutionAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    # What was run and how it ended first, so they fit at 1280 px beside the filters: the
    # channel, kind and background flag are filters (and on the change page) instead.
    list_display = [
        "id",
        "short_command",
        "status",
        "exit_code",
        "duration",
        "sandbox",
        "actor",
        "created_at",
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
            {"fields": ["created_at", "started_at", "finished_at", "duration"]},
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

    @admin.display(description="command", ordering="command")
    def short_command(self, execution: CommandExecution) -> str:
        return truncated(execution.command)

    @admin.display(description="duration", ordering="duration_seconds")
    def duration(self, execution: CommandExecution) -> str:
        return human_duration(execution.duration_seconds)

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
