"""Admin of snapshots: read-only; deleted through the service (its files removed from its
host, audited), the row kept as history."""

from __future__ import annotations

from django.contrib import admin
from django.template.defaultfilters import filesizeformat

from sandboxes import services
from sandboxes.admin.deletion import DeleteThroughServiceMixin
from sandboxes.models import Snapshot
from tenants.admin import ReadOnlyAdminMixin, pretty_json
from tenants.principal import Principal


@admin.register(Snapshot)
class SnapshotAdmin(DeleteThroughServiceMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
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
    # delete_selected replaces Django's bulk delete (deletion.py).
    actions = ["delete_selected"]
    delete_permission = "sandboxes.delete_snapshot"
    delete_removes = ("each snapshot's files on its host",)
    delete_keeps = ("each snapshot's record, marked deleted", "the audit log")

    def delete_through_service(self, principal: Principal, public_id: str) -> None:
        services.delete_snapshot(principal, public_id)

    @admin.display(description="size", ordering="size_bytes")
    def size(self, snapshot: Snapshot) -> str:
        return filesizeformat(snapshot.size_bytes)

    @admin.display(description="backend state")
    def backend_state_pretty(self, snapshot: Snapshot) -> str:
        return pretty_json(snapshot.backend_state)
