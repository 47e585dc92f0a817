"""Admin of previews and links (read-only)."""

from __future__ import annotations

from django.contrib import admin

from sandboxes.models import (
    AccessLink,
    Preview,
)
from tenants.admin import ReadOnlyAdminMixin


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
