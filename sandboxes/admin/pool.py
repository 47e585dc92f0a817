"""Admin of the warm pool (read-only)."""

from __future__ import annotations

from django.contrib import admin

from sandboxes.models import (
    WarmContainer,
)
from tenants.admin import ReadOnlyAdminMixin


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
