"""The warning before a sandbox expires, on the sandbox page and in the list: a template tag
library ({% load expiry %}, registered in settings.TEMPLATES), since both pages show it the
same way. Shown when the sandbox expires within SANDHUB_EXPIRY_WARNING_MINUTES, with the time
left and, for a writer of a running sandbox that may still live longer, an Extend button."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.conf import settings
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.results import SandboxInfo

register = template.Library()

# What extend_sandbox grants from a warning's button, at most (the team's maximum may be less).
EXTEND_MINUTES = 60
WARNED_STATUSES = frozenset({"running", "paused", "stopped"})


def minutes_left(info: SandboxInfo, now: datetime | None = None) -> int | None:
    """Whole minutes (rounded up) before the sandbox expires, when that is within the warning
    window; None when there is nothing to warn about."""
    window = settings.SANDHUB_EXPIRY_WARNING_MINUTES
    if not window or info.expires_at is None or info.status not in WARNED_STATUSES:
        return None
    seconds = (info.expires_at - (now or timezone.now())).total_seconds()
    if seconds > window * 60:
        return None
    return max(0, -(-int(seconds) // 60))


@register.inclusion_tag("web/sandbox/_expiry.html", takes_context=True)
def expiry_warning(context: dict[str, Any], info: SandboxInfo, compact: bool = False) -> dict:
    left = minutes_left(info)
    web = context.get("web")
    extend = 0
    if left is not None and web is not None and web.can_write and info.status == "running":
        team = web.principal.team
        extend = min(EXTEND_MINUTES, services.extendable_minutes(info, team)) if team else 0
    return {
        "sandbox": info,
        "left": left,
        "extend": extend,
        "compact": compact,
        "web": web,
        "csrf_token": context.get("csrf_token"),
    }
