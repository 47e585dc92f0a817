"""Admin actions that pause, resume and stop the selected sandboxes, each through its
service (quotas, the rule for running commands, audited on the sandbox's team), reporting
what happened to each."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from hosts.admin.actions import apply_each
from sandboxes import services
from sandboxes.contract.lifecycle import LifecycleChange
from sandboxes.models import Sandbox
from tenants.admin import admin_principal

LIFECYCLE_ACTIONS = ["pause_selected", "resume_selected", "stop_selected"]


class LifecycleActions:
    """Mixed into SandboxAdmin (sandbox.py)."""

    @admin.action(description="Pause selected sandboxes (memory kept)", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Sandbox]) -> None:
        self._each(request, queryset, services.pause_sandbox, "paused")

    @admin.action(description="Resume selected sandboxes", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Sandbox]) -> None:
        self._each(request, queryset, services.resume_sandbox, "running")

    @admin.action(description="Stop selected sandboxes (files kept)", permissions=["destroy"])
    def stop_selected(self, request: HttpRequest, queryset: QuerySet[Sandbox]) -> None:
        self._each(request, queryset, services.stop_sandbox, "stopped")

    def _each(
        self,
        request: HttpRequest,
        queryset: QuerySet[Sandbox],
        service: Callable[..., LifecycleChange],
        done: str,
    ) -> None:
        def call(sandbox: Sandbox) -> str:
            # The sandbox's team on the principal files the audit row under that team.
            principal = admin_principal(request, team=sandbox.team)
            change = service(principal, sandbox.public_id)
            return f"{sandbox}: {done}" + ("" if change.changed else " already")

        apply_each(self, request, queryset.select_related("team"), call)  # type: ignore[arg-type]
