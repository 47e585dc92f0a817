"""The platform's processes as their liveness leases show them (read-only): which web and
worker processes are alive, since when, what task a worker runs, and which died (the
lease expired, their running commands were closed) or stopped cleanly."""

from __future__ import annotations

from django.contrib import admin

from sandboxes.models import ProcessLease
from tenants.admin import ReadOnlyAdminMixin

_LEASE_FIELDS = (
    "kind",
    "hostname",
    "pid",
    "started_at",
    "renewed_at",
    "expires_at",
    "ended_at",
    "end",
    "task_name",
    "task_id",
)


@admin.register(ProcessLease)
class ProcessLeaseAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Rows are written by the processes' heartbeats only (sandboxes/housekeeping/liveness)."""

    list_display = ["__str__", "kind", "hostname", "pid", "renewed_at", "ended_at", "end"]
    list_filter = ["kind", "end", "hostname"]
    search_fields = ["hostname", "task_name"]
    date_hierarchy = "started_at"
    fields = _LEASE_FIELDS
    readonly_fields = _LEASE_FIELDS
