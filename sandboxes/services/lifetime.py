"""A sandbox's lifetime: extend its expiry, within its team's maximum lifetime.

The rule: `minutes` are added to the later of now and the current expiry, and the new expiry
may not pass `created_at + team.max_lifetime_minutes` (the same maximum create_sandbox holds a
new sandbox's lifetime to, counted from the same moment). An extension past it is refused,
saying how much is left, rather than cut short silently: the person asked for a time and
should know it was not granted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from sandboxes.contract.errors import Conflict, QuotaExceeded
from sandboxes.contract.results import SandboxInfo
from sandboxes.models import Sandbox, SandboxStatus
from sandboxes.policy import access, validation
from sandboxes.policy.access import WRITE
from tenants.auditing import audited, current
from tenants.models import Team
from tenants.principal import Principal


def latest_expiry(created_at: datetime, team: Team) -> datetime:
    """The latest expiry a sandbox whose lifetime started at `created_at` may be given."""
    return created_at + timedelta(minutes=team.max_lifetime_minutes)


def extendable_minutes(info: SandboxInfo, team: Team, now: datetime | None = None) -> int:
    """Whole minutes the sandbox's expiry may still be pushed back (0: none). For forms."""
    now = now or timezone.now()
    start = max(now, info.expires_at) if info.expires_at else now
    left = latest_expiry(info.created_at, team) - start
    return max(0, int(left.total_seconds() // 60))


@audited("sandbox.extend", "sandbox", atomic=True)
def extend_sandbox(principal: Principal, sandbox_id: str, minutes: int) -> SandboxInfo:
    """Push the sandbox's expiry back by `minutes`, within its team's maximum lifetime."""
    current().target("sandbox", sandbox_id)
    validation.positive_int(minutes, "minutes", minimum=1)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "extend sandboxes")
    with transaction.atomic():
        # Locked: two extensions at once both count from the expiry the other one set, and
        # the sweeper's claim (a compare-and-set on the status) sees the new expiry or wins.
        locked = (
            Sandbox.objects.select_for_update(of=("self",))
            .select_related("team", "owner", "host", "image")
            .get(pk=sandbox.pk)
        )
        if locked.status != SandboxStatus.RUNNING:
            raise Conflict(f"sandbox {sandbox_id} is {locked.status}; only a running one lasts")
        now = timezone.now()
        start = max(now, locked.expires_at) if locked.expires_at else now
        wanted = start + timedelta(minutes=minutes)
        # From its creation, or from the resume that gave it a fresh lifetime (pause policy).
        ceiling = latest_expiry(locked.lifetime_started_at or locked.created_at, locked.team)
        if wanted > ceiling:
            left = max(0, int((ceiling - start).total_seconds() // 60))
            raise QuotaExceeded(
                f"team quota: sandboxes live at most {locked.team.max_lifetime_minutes} minutes "
                f"from creation; this one may be extended by at most {left} more minutes"
            )
        current().details.update(
            {
                "minutes": minutes,
                "from": locked.expires_at.isoformat() if locked.expires_at else None,
                "to": wanted.isoformat(),
            }
        )
        locked.expires_at = wanted
        locked.save(update_fields=["expires_at"])
    return SandboxInfo.from_model(locked)
