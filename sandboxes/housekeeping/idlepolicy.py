"""The sweep's lifecycle beyond deletion: what a team's policy (Team.idle_action and its
clocks) does with sandboxes it would otherwise delete or leave be.

- idle_action "pause": a running sandbox idle past the team's timeout, or past its
  lifetime, is paused instead of deleted (audited sandbox.idle.pause / sandbox.expire.pause).
  No room among the team's paused sandboxes: it is stopped instead (sandbox.idle.stop /
  sandbox.expire.stop); no room among stopped ones either: deleted, as the delete policy
  would (sandbox.idle / sandbox.expire, with the reason). A resume gives it a fresh
  lifetime (transitions.settle). Paused and stopped sandboxes are not ended by their
  lifetime under this policy: their own clocks below end them.
- every team: a sandbox paused longer than stop_paused_after_hours is stopped
  (sandbox.paused.stop; kept paused, and reported, while the stopped quota is full); one
  stopped longer than delete_stopped_after_days is deleted (sandbox.stopped.delete). 0
  turns either off. Idleness never applies to a paused or stopped sandbox.

Every change claims the row with a compare-and-set that also requires it to be as the sweep
saw it (still idle, still expired, still paused since then), so a command or a resume that
comes first keeps it; a foreground command running holds a pause or stop (the next sweep
tries again).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet

from sandboxes.contract.errors import Conflict, QuotaExceeded, ServiceError
from sandboxes.housekeeping import transitions
from sandboxes.housekeeping.config import system_for
from sandboxes.models import Sandbox, SandboxStatus
from sandboxes.policy import quotas
from tenants.auditing import audited, current
from tenants.models import IdleAction, Team
from tenants.principal import Principal

S = SandboxStatus
# Deletes what it is given, as the sweep does (sweep.py's claim and retire), saying why.
Deleter = Callable[[Sandbox, Q, str, str], bool]


def pauses(sandbox: Sandbox) -> bool:
    """Whether the team's policy pauses this sandbox rather than deleting it."""
    return sandbox.team.idle_action == IdleAction.PAUSE and sandbox.status == S.RUNNING


def outlives_expiry(sandbox: Sandbox) -> bool:
    """Paused and stopped sandboxes of a team that pauses follow their own clocks."""
    return sandbox.team.idle_action == IdleAction.PAUSE and sandbox.status in (
        S.PAUSED,
        S.STOPPED,
    )


def put_aside(
    sandbox: Sandbox, reason: str, still: Q, why: str, delete: Deleter
) -> tuple[str, str]:
    """Pause the sandbox (else stop it, else delete it) for `reason` ("idle", "expire");
    (what was done: "paused", "stopped", "deleted" or "", and a failure's message)."""
    principal = system_for(sandbox.team)
    for target in (S.PAUSED, S.STOPPED):
        if not _room_for(sandbox, target):
            continue  # looked at first: no refused attempt on record every minute
        try:
            suspend(principal, sandbox, target, f"sandbox.{reason}.{_verb(target)}", why, still)
        except QuotaExceeded:
            continue
        except Conflict:
            return "", ""  # busy, or another got there first: the next sweep looks again
        except ServiceError as exc:
            return "", exc.message
        return target, ""
    full = f"{why}; no room among the team's paused or stopped sandboxes"
    return ("deleted", "") if delete(sandbox, still, full, reason) else ("", "")


def _room_for(sandbox: Sandbox, target: str) -> bool:
    """Whether the team has room for one more sandbox in `target` (the claim checks again,
    locked)."""
    room = quotas.require_paused_room if target == S.PAUSED else quotas.require_stopped_room
    try:
        room(sandbox.team, sandbox)
    except QuotaExceeded:
        return False
    return True


def _verb(target: str) -> str:
    return "pause" if target == S.PAUSED else "stop"


@audited("sandbox.idle.pause", "sandbox")
def suspend(
    principal: Principal, sandbox: Sandbox, target: str, action: str, why: str, still: Q
) -> None:
    """Pause or stop a sandbox for the sweep, audited as `action`."""
    draft = current()
    draft.action = action
    draft.target("sandbox", sandbox.public_id)
    draft.details.update({"reason": why, "from": sandbox.status})
    claiming, room = (
        (S.PAUSING, quotas.require_paused_room)
        if target == S.PAUSED
        else (S.HALTING, quotas.require_stopped_room)
    )
    transitions.claim(sandbox, claiming, f"auto: {why}", room, idle=True, still=still)
    verb = _verb(target)
    transitions.host_step(sandbox, lambda backend, state: getattr(backend, verb)(state), verb)
    transitions.settle(sandbox, target)


def sweep_paused_and_stopped(
    now: datetime, delete: Deleter, done: dict[str, list[str]], failed: dict[str, str]
) -> None:
    """Stop sandboxes paused too long; delete those stopped too long (each team's clocks)."""
    for team in _teams(S.PAUSED, "stop_paused_after_hours"):
        cutoff = now - timedelta(hours=team.stop_paused_after_hours)
        still = Q(status_changed_at__lt=cutoff)
        why = f"paused for over {team.stop_paused_after_hours} hours"
        for sandbox in _of(team, S.PAUSED).filter(still):
            try:
                suspend(system_for(team), sandbox, S.STOPPED, "sandbox.paused.stop", why, still)
            except Conflict:
                continue
            except ServiceError as exc:
                failed[sandbox.public_id] = exc.message
            else:
                done["stopped"].append(sandbox.public_id)
    for team in _teams(S.STOPPED, "delete_stopped_after_days"):
        cutoff = now - timedelta(days=team.delete_stopped_after_days)
        still = Q(status_changed_at__lt=cutoff)
        why = f"stopped for over {team.delete_stopped_after_days} days"
        for sandbox in _of(team, S.STOPPED).filter(still):
            if delete(sandbox, still, why, "stopped.delete"):
                done["deleted"].append(sandbox.public_id)


def _teams(status: str, clock: str) -> QuerySet[Team]:
    return Team.objects.filter(**{f"{clock}__gt": 0}, sandboxes__status=status).distinct()


def _of(team: Team, status: str) -> QuerySet[Sandbox]:
    return (
        Sandbox.objects.filter(team=team, status=status)
        .filter(Q(host__isnull=True) | Q(host__healthy=True))
        .select_related("team", "host", "image")
        .order_by("pk")
    )
