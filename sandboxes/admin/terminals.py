"""Terminals and shell sessions in admin: a read-only list (who opened which, when, and why it
ended). They are opened, attached and closed only through the services, which audit each."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from sandboxes.models import Terminal


@admin.register(Terminal)
class TerminalAdmin(admin.ModelAdmin):
    list_display = ["terminal_id", "kind", "name", "sandbox", "opened_by", "channel"]
    list_display += ["created_at", "last_seen_at", "closed_at", "close_reason"]
    list_filter = ["kind", "channel", ("closed_at", admin.EmptyFieldListFilter)]
    list_select_related = ["sandbox", "opened_by"]
    search_fields = ["terminal_id", "name", "sandbox__public_id", "opened_by__username"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
