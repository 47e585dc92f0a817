"""A team's quotas by state: what holds CPU (running), memory (paused) and disk only
(stopped) is counted each its own way.

- running: max_running_sandboxes counts LIVE_STATUSES (pending, starting, running, resuming,
  and those on their way to a pause, a stop or deletion: they hold CPU until the host is
  done). A create and a resume need room there.
- paused: max_paused_sandboxes counts paused and pausing ones, and max_paused_memory_mb (0:
  none) adds up their memory limits, since a paused sandbox keeps its memory.
- stopped: max_stopped_sandboxes counts stopped and halting ones (files only).

Each check is made with the team's row locked (`locked_team`), in the transaction that
then claims the sandbox (a compare-and-set of its status), so two requests cannot both take
the last place. Refusals say what to do instead and change nothing.
"""

from __future__ import annotations

from django.db.models import Sum

from sandboxes.contract.errors import QuotaExceeded
from sandboxes.models import Sandbox
from tenants.models import Team


def locked_team(team_id: int) -> Team:
    """The team's row, locked until the transaction ends (the caller holds one)."""
    return Team.objects.select_for_update().get(pk=team_id)


def require_running_room(team: Team, sandbox: Sandbox) -> None:
    """Room for one more running sandbox (a resume): its own row is not counted."""
    running = Sandbox.objects.filter(team=team).live().exclude(pk=sandbox.pk).count()
    if running >= team.max_running_sandboxes:
        raise QuotaExceeded(
            f"team quota: at most {team.max_running_sandboxes} running sandboxes ({running} "
            f"running); pause, stop or delete one before resuming {sandbox.public_id}"
        )


def require_paused_room(team: Team, sandbox: Sandbox) -> None:
    """Room for one more paused sandbox, by count and by the memory paused ones keep."""
    paused = Sandbox.objects.filter(team=team).paused().exclude(pk=sandbox.pk)
    count = paused.count()
    if count >= team.max_paused_sandboxes:
        raise QuotaExceeded(
            f"team quota: at most {team.max_paused_sandboxes} paused sandboxes ({count} "
            f"paused); stop (files kept, memory freed) or delete one, or stop this one instead"
        )
    if not team.max_paused_memory_mb:
        return
    held = paused.aggregate(total=Sum("memory_mb"))["total"] or 0
    if held + sandbox.memory_mb > team.max_paused_memory_mb:
        raise QuotaExceeded(
            f"team quota: paused sandboxes keep at most {team.max_paused_memory_mb} MB of "
            f"memory ({held} MB kept now, this one has {sandbox.memory_mb} MB); stop or "
            "delete a paused one, or stop this one instead"
        )


def require_stopped_room(team: Team, sandbox: Sandbox) -> None:
    """Room for one more stopped sandbox."""
    count = Sandbox.objects.filter(team=team).stopped().exclude(pk=sandbox.pk).count()
    if count >= team.max_stopped_sandboxes:
        raise QuotaExceeded(
            f"team quota: at most {team.max_stopped_sandboxes} stopped sandboxes ({count} "
            "stopped); delete one first"
        )
