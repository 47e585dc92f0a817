"""Admin of snapshots: read-only; deleted through the service (its files removed from its
host, audited), the row kept as history."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse

from hosts.admin.actions import apply_each
from sandboxes import services
from sandboxes.models import Snapshot, SnapshotStatus
from tenants.admin import ReadOnlyAdminMixin, admin_principal, pretty_json


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "public_id",
        "name",
        "team",
        "status",
        "source",
        "host",
        "size",
        "image",
        "created_by",
        "created_at",
        "deleted_at",
    ]
    list_filter = ["status", "team", "host", "host_kind", "created_at"]
    search_fields = ["public_id", "name", "team__slug", "source__public_id", "host__name"]
    date_hierarchy = "created_at"
    list_select_related = ["team", "source", "host", "image", "created_by"]
    fields = (
        "public_id",
        "name",
        "team",
        "status",
        "status_message",
        "source",
        "host_kind",
        "host",
        "size",
        "image",
        "cpus",
        "memory_mb",
        "disk_mb",
        "network",
        "created_by",
        "created_at",
        "deleted_at",
        "backend_state_pretty",
    )
    readonly_fields = fields
    # Same name as Django's bulk delete: a snapshot is deleted through the service.
    actions = ["delete_selected"]

    def has_destroy_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("sandboxes.delete_snapshot")

    @admin.action(description="Delete selected snapshots", permissions=["destroy"])
    def delete_selected(
        self, request: HttpRequest, queryset: QuerySet[Snapshot]
    ) -> TemplateResponse | None:
        if not request.POST.get("post"):
            return self._confirm_delete(request, queryset)
        apply_each(self, request, queryset.select_related("team"), self._delete_one(request))
        return None

    def _delete_one(self, request: HttpRequest):
        def call(snapshot: Snapshot) -> str:
            if snapshot.status == SnapshotStatus.DELETED:
                return f"{snapshot}: already deleted"
            principal = admin_principal(request, team=snapshot.team)
            services.delete_snapshot(principal, snapshot.public_id)
            return f"{snapshot}: deleted"

        return call

    def _confirm_delete(
        self, request: HttpRequest, queryset: QuerySet[Snapshot]
    ) -> TemplateResponse:
        count = queryset.count()
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": "Delete snapshots",
            "subtitle": "Their files are removed from their hosts; the records stay.",
            "objects_name": "snapshots" if count != 1 else "snapshot",
            "deletable_objects": [[f"{s} ({s.team}, {s.status})" for s in queryset]],
            "model_count": {"snapshots": count}.items(),
            "queryset": queryset,
            "perms_lacking": False,
            "protected": False,
            "opts": self.opts,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/delete_selected_confirmation.html", context)

    @admin.display(description="size", ordering="size_bytes")
    def size(self, snapshot: Snapshot) -> str:
        return filesizeformat(snapshot.size_bytes)

    @admin.display(description="backend state")
    def backend_state_pretty(self, snapshot: Snapshot) -> str:
        return pretty_json(snapshot.backend_state)
