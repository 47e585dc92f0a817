"""A sandbox's lifetime: extend its expiry or set it anew, within its team's maximum lifetime.

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
        locked = _locked_running(sandbox)
        now = timezone.now()
        start = max(now, locked.expires_at) if locked.expires_at else now
        _set_expiry(locked, start, start + timedelta(minutes=minutes), {"minutes": minutes})
    return SandboxInfo.from_model(locked)


@audited("sandbox.timeout", "sandbox", atomic=True)
def set_sandbox_timeout(principal: Principal, sandbox_id: str, seconds: int) -> SandboxInfo:
    """The sandbox expires `seconds` from now (sooner or later than it would have: E2B's
    set_timeout), within its team's maximum lifetime. The sweep deletes it once it expired
    (it runs every minute)."""
    current().target("sandbox", sandbox_id)
    validation.positive_int(seconds, "timeout", minimum=1, maximum=MAX_TIMEOUT_SECONDS)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "set sandbox timeouts")
    with transaction.atomic():
        locked = _locked_running(sandbox)
        now = timezone.now()
        _set_expiry(locked, now, now + timedelta(seconds=seconds), {"seconds": seconds})
    return SandboxInfo.from_model(locked)


MAX_TIMEOUT_SECONDS = 366 * 24 * 3600  # beyond any team's maximum: refused by it, not here


def _locked_running(sandbox: Sandbox) -> Sandbox:
    # Locked: two changes at once both count from the expiry the other one set, and the
    # sweeper's claim (a compare-and-set on the status) sees the new expiry or wins.
    locked = (
        Sandbox.objects.select_for_update(of=("self",))
        .select_related("team", "owner", "host", "image")
        .get(pk=sandbox.pk)
    )
    if locked.status != SandboxStatus.RUNNING:
        raise Conflict(f"sandbox {sandbox.public_id} is {locked.status}; only a running one lasts")
    return locked


def _set_expiry(
    locked: Sandbox, start: datetime, wanted: datetime, details: dict[str, object]
) -> None:
    """Save `wanted` as the expiry, or refuse it past the team's maximum lifetime (counted
    from the creation, or from the resume that gave a fresh lifetime: pause policy)."""
    ceiling = latest_expiry(locked.lifetime_started_at or locked.created_at, locked.team)
    if wanted > ceiling:
        left = max(0, int((ceiling - start).total_seconds() // 60))
        raise QuotaExceeded(
            f"team quota: sandboxes live at most {locked.team.max_lifetime_minutes} minutes "
            f"from creation; this one may last at most {left} more minutes"
        )
    current().details.update(
        {
            **details,
            "from": locked.expires_at.isoformat() if locked.expires_at else None,
            "to": wanted.isoformat(),
        }
    )
    locked.expires_at = wanted
    locked.save(update_fields=["expires_at"])
