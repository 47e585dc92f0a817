"""What every app's admin shares: the acting principal, read-only history, JSON display, and
calling a service from an admin hook.

In its own module so tenants' admin modules (__init__.py, apikeys.py) use it without
importing each other; tenants.admin re-exports it for the other apps' admins.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from tenants.apikeys import clean_address
from tenants.errors import ServiceError
from tenants.models import Channel, Team
from tenants.principal import Principal

R = TypeVar("R")


def admin_principal(request: HttpRequest, team: Team | None = None) -> Principal:
    """The signed-in staff user acting through admin: services treat it as a platform admin.

    `team` only labels the audit row (e.g. the team whose sandbox is deleted).
    """
    return Principal(
        user=request.user,
        team=team,
        channel=Channel.ADMIN,
        # The audit column is an IP address (inet on PostgreSQL): anything else is left out.
        source_address=clean_address(request.META.get("REMOTE_ADDR")),
    )


def call_service(
    model_admin: admin.ModelAdmin, request: HttpRequest, service: Callable[..., R], *args: Any
) -> R | None:
    """The service's result, or None after telling the admin user why it refused.

    The refusal is not raised: admin views run in one transaction, and an exception would
    roll back the failure row the service just wrote to the audit log.
    """
    try:
        return service(*args)
    except ServiceError as exc:
        model_admin.message_user(request, f"Failed: {exc.message}", messages.ERROR)
        return None


class ReadOnlyAdminMixin:
    """History is viewable but never added, edited or deleted, not even by a superuser.

    Without change permission Django renders the change page read-only and refuses a POST to
    it (403); without delete permission the bulk "delete selected" action disappears too.
    """

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def pretty_json(value: Any) -> str:
    """JSON as an indented, escaped <pre> block, readable in a change page."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    # A class, not a style attribute: the Content-Security-Policy blocks inline style
    # (platform_site/csp.py); static/web/admin.css has the rule.
    return format_html("<pre class='sandhub-pre'>{}</pre>", text)


def truncated(text: str, limit: int = 48) -> SafeString:
    """A long value for a list column: cut at `limit` characters with "…" (and by CSS at the
    column's width), whole in the title attribute (shown on hover, read by screen readers).
    Escaped: commands and endpoints are user input."""
    one_line = " ".join(text.split())
    shown = one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"
    # static/web/admin.css: one line, cut with an ellipsis if the column is narrower still.
    return format_html('<span class="sandhub-cut" title="{}">{}</span>', text, shown)
