"""Usage samples in admin: read-only lists (the sampling task and the probes write them; the
charts on the sandbox and host change pages draw them)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from sandboxes.models import HostUsageSample, UsageSample


class ReadOnlySamples(admin.ModelAdmin):
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(UsageSample)
class UsageSampleAdmin(ReadOnlySamples):
    list_display = ["sandbox", "at", "cpu_percent", "memory_bytes", "disk_used_bytes", "pids"]
    list_select_related = ["sandbox"]
    search_fields = ["sandbox__public_id"]


@admin.register(HostUsageSample)
class HostUsageSampleAdmin(ReadOnlySamples):
    list_display = [
        "host",
        "at",
        "cpu_percent",
        "memory_percent",
        "gpu_percent",
        "sandboxes_running",
    ]
    list_filter = ["host"]
    list_select_related = ["host"]
