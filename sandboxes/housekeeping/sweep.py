"""Auto-cleanup: delete sandboxes past their lifetime or idle beyond their team's idle
timeout (or, under a team's pause policy, pause them; and stop and delete paused and stopped
ones on the team's clocks: idlepolicy.py), close command rows whose recorder died, delete
file links and preview tokens long expired or revoked, and forget expired MCP sessions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from hosts.backends import get_backend
from sandboxes.contract.errors import BackendFailure, ServiceError
from sandboxes.housekeeping import idlepolicy, liveness
from sandboxes.housekeeping.config import system_for
from sandboxes.models import AccessLink, CommandExecution, CommandStatus, Sandbox, SandboxStatus
from tenants import apikeys
from tenants.auditing import audited, change, current
from tenants.models import Team
from tenants.principal import Principal

# Sandboxes the sweep may delete: pending/starting are being created, stopping being deleted,
# pausing, resuming and halting claimed by a request that is calling their host.
SWEEPABLE = (
    SandboxStatus.RUNNING,
    SandboxStatus.PAUSED,
    SandboxStatus.STOPPED,
    SandboxStatus.ERROR,
    SandboxStatus.LOST,
)
# Idleness is a running sandbox's (paused and stopped ones have their own clocks), and a
# failed one's, which nothing else ends.
IDLE_SWEEPABLE = (SandboxStatus.RUNNING, SandboxStatus.ERROR, SandboxStatus.LOST)
# Statuses a sandbox passes through while a request creates or deletes it. One still in them
# this long after its expiry was left there by a process that died mid-way (and may still
# hold a container, and counts against its team's quota): the sweep finishes the job.
IN_FLIGHT = (
    SandboxStatus.PENDING,
    SandboxStatus.STARTING,
    SandboxStatus.STOPPING,
    SandboxStatus.PAUSING,
    SandboxStatus.RESUMING,
    SandboxStatus.HALTING,
)
STUCK_AFTER_EXPIRY = timedelta(minutes=10)
# How the sweep's own claims begin (_claim). One still stopping this long after the claim was
# left by a worker that died mid-deletion (kill -9, out of memory): finished then, whatever
# its expiry says (a sandbox claimed for idleness may have hours of lifetime left).
SWEEP_CLAIM = "auto-cleanup at "
# A sandbox with a command queued or running is in use, whatever last_activity_at says: a
# background job (or a long foreground one) only touches it when it finishes.
BUSY_COMMAND_STATUSES = (CommandStatus.QUEUED, CommandStatus.RUNNING)
# How long a link's row is kept after it expired or was revoked: the sandbox page and admin
# show who made it, when it was last used and who revoked it while the audit rows that name
# it (by its id) are fresh; the audit log keeps those for good.
LINK_RETENTION = timedelta(days=7)


@dataclass
class SweepReport:
    expired: list[str] = field(default_factory=list)
    idle: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)  # by the team's pause policy
    stopped: list[str] = field(default_factory=list)  # ... or paused too long
    deleted: list[str] = field(default_factory=list)  # stopped too long
    failed: dict[str, str] = field(default_factory=dict)
    abandoned_commands: int = 0
    links_deleted: int = 0
    expired_mcp_sessions: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sweep(now: datetime | None = None) -> SweepReport:
    """Delete sandboxes past expires_at, then those idle beyond their team's idle timeout
    (expired MCP sessions and abandoned command rows first).

    Sandboxes on hosts that do not answer wait until they do (their deletion would fail).
    Each deletion first moves the row to stopping with a conditional UPDATE, so two workers
    sweeping at once never delete the same sandbox twice, and a command that starts in the
    meantime keeps an idle sandbox alive.
    """
    now = now or timezone.now()
    report = SweepReport(
        abandoned_commands=close_abandoned_commands(now),
        links_deleted=delete_old_links(now),
        expired_mcp_sessions=apikeys.sweep_sessions(now),
    )
    for sandbox in _sweepable().filter(expires_at__lte=now):
        if idlepolicy.outlives_expiry(sandbox):
            continue
        expired = Q(expires_at__lte=now)
        if idlepolicy.pauses(sandbox):
            _put_aside(sandbox, "expire", expired, "expired", report, now)
        elif _claim(sandbox, expired, "expired", now):
            _retire_reporting(sandbox, "expire", report.expired, report)
    stuck = Q(expires_at__lte=now - STUCK_AFTER_EXPIRY) | _left_by_a_dead_sweeper(now)
    for sandbox in _sweepable(IN_FLIGHT).filter(stuck):
        expired_long_ago = sandbox.expires_at and sandbox.expires_at <= now - STUCK_AFTER_EXPIRY
        why = "expired while" if expired_long_ago else "left by a worker that died while"
        if _claim(sandbox, stuck, f"{why} {sandbox.status}, and stuck there", now):
            _retire_reporting(sandbox, "expire", report.expired, report)
    for team in _teams_with_idle_timeout():
        cutoff = now - timedelta(minutes=team.idle_timeout_minutes)
        idle = Q(last_activity_at__lt=cutoff) & ~Q(Exists(_busy_commands()))
        why = f"idle for over {team.idle_timeout_minutes} minutes"
        for sandbox in _sweepable(IDLE_SWEEPABLE).filter(team=team).filter(idle):
            if idlepolicy.pauses(sandbox):
                _put_aside(sandbox, "idle", idle, why, report, now)
            elif _claim(sandbox, idle, why, now):
                _retire_reporting(sandbox, "idle", report.idle, report)
    done = {"stopped": report.stopped, "deleted": report.deleted}
    idlepolicy.sweep_paused_and_stopped(now, _deleter(report, now, None), done, report.failed)
    return report


def _put_aside(
    sandbox: Sandbox, reason: str, still: Q, why: str, report: SweepReport, now: datetime
) -> None:
    """Pause (else stop, else delete) a sandbox of a team whose policy pauses."""
    done = report.expired if reason == "expire" else report.idle
    outcome, failure = idlepolicy.put_aside(
        sandbox, reason, still, why, _deleter(report, now, done)
    )
    if outcome in (SandboxStatus.PAUSED, SandboxStatus.STOPPED):
        (report.paused if outcome == SandboxStatus.PAUSED else report.stopped).append(
            sandbox.public_id
        )
    if failure:
        report.failed[sandbox.public_id] = failure


def _deleter(report: SweepReport, now: datetime, done: list[str] | None) -> idlepolicy.Deleter:
    """Claim and delete, as the sweep deletes: for idlepolicy's last resort and its clocks."""

    def delete(sandbox: Sandbox, still: Q, why: str, reason: str) -> bool:
        if not _claim(sandbox, still, why, now):
            return False
        failed = sandbox.public_id in report.failed
        _retire_reporting(sandbox, reason, done if done is not None else [], report)
        return not failed and sandbox.public_id not in report.failed

    return delete


def delete_old_links(now: datetime) -> int:
    """Delete the rows of links that ended (expired or revoked) over LINK_RETENTION ago."""
    deleted, _ = AccessLink.objects.ended_before(now - LINK_RETENTION).delete()
    return deleted


# How long past its own deadline a command row may stay unfinished before the sweep decides
# the process recording it died (a web process killed mid-command, a crash mid-start).
ABANDONED_AFTER = timedelta(minutes=5)


def close_abandoned_commands(now: datetime) -> int:
    """Mark as error the command rows whose recorder died, so they stop keeping sandboxes busy.

    Rows carrying an expired liveness lease are closed at once (housekeeping/liveness.py);
    the rest (rows from before leases, or recorded by a process without one) as follows.
    A foreground command past its timeout plus a grace period, or a background command
    still queued (never started) after the grace period, will never be finished by anyone.
    Running background commands are not touched: their job records its own end and
    recover_background supervises them again.
    """
    # Few rows are ever running at once: the per-row deadline is checked here, not in SQL,
    # where duration arithmetic differs between SQLite and PostgreSQL.
    running = CommandExecution.objects.filter(
        background=False, status=CommandStatus.RUNNING, started_at__lt=now - ABANDONED_AFTER
    ).values_list("pk", "started_at", "timeout_seconds")
    overdue_foreground = CommandExecution.objects.filter(
        status=CommandStatus.RUNNING,
        pk__in=[
            pk
            for pk, started_at, timeout in running
            if started_at is not None
            and started_at + timedelta(seconds=timeout) + ABANDONED_AFTER < now
        ],
    )
    never_started = CommandExecution.objects.filter(
        background=True, status=CommandStatus.QUEUED, created_at__lt=now - ABANDONED_AFTER
    )
    # Rows of processes whose liveness lease expired, at once (the heartbeats of live
    # processes do this first; the sweep is the backstop when none runs).
    closed = liveness.close_expired()
    liveness.forget_ended()
    for rows, why in (
        (overdue_foreground, "abandoned: the process running it stopped before recording"),
        (never_started, "abandoned: the process starting it stopped before it started"),
    ):
        closed += rows.update(status=CommandStatus.ERROR, error_message=why, finished_at=now)
    return closed


def _left_by_a_dead_sweeper(now: datetime) -> Q:
    return Q(
        status=SandboxStatus.STOPPING,
        status_message__startswith=SWEEP_CLAIM,
        status_changed_at__lte=now - STUCK_AFTER_EXPIRY,
    )


def _sweepable(statuses: tuple[str, ...] = SWEEPABLE) -> QuerySet[Sandbox]:
    return (
        Sandbox.objects.filter(status__in=statuses)
        .filter(Q(host__isnull=True) | Q(host__healthy=True))
        .select_related("team", "host", "image")
        .order_by("pk")
    )


def _teams_with_idle_timeout() -> QuerySet[Team]:
    # 0 turns the idle timeout off for a team.
    return Team.objects.filter(
        idle_timeout_minutes__gt=0, sandboxes__status__in=IDLE_SWEEPABLE
    ).distinct()


def _busy_commands() -> QuerySet[CommandExecution]:
    return CommandExecution.objects.filter(sandbox=OuterRef("pk"), status__in=BUSY_COMMAND_STATUSES)


def _claim(sandbox: Sandbox, still: Q, why: str, now: datetime) -> bool:
    """Move the sandbox to stopping if it is still as the sweep saw it; True if this worker won.

    Compare-and-set on status and message: a stuck sandbox is stopping already, and the
    new message (with the time) is what tells a second sweeper it lost.
    """
    message = f"{SWEEP_CLAIM}{now:%Y-%m-%d %H:%M:%S} UTC: {why}"
    return sandbox.transition_if(SandboxStatus.STOPPING, message, still)


def _retire_reporting(sandbox: Sandbox, reason: str, done: list[str], report: SweepReport) -> None:
    try:
        retire(system_for(sandbox.team), sandbox, reason)
    except ServiceError as exc:
        report.failed[sandbox.public_id] = exc.message
    else:
        done.append(sandbox.public_id)


@audited("sandbox.expire", "sandbox")
def retire(principal: Principal, sandbox: Sandbox, reason: str) -> None:
    """Remove a sandbox the sweep claimed (status stopping); audited as sandbox.<reason>."""
    draft = current()
    draft.action = f"sandbox.{reason}"
    draft.target("sandbox", sandbox.public_id)
    draft.details.update(
        {
            "reason": sandbox.status_message,
            "host": sandbox.host.name if sandbox.host else None,
            "last_activity_at": sandbox.last_activity_at.isoformat(),
            "expires_at": sandbox.expires_at.isoformat() if sandbox.expires_at else None,
        }
    )
    try:
        if sandbox.host and sandbox.backend_state:
            get_backend(sandbox.host).destroy(sandbox.backend_state)
    except Exception as exc:  # whatever it was, never leave the sandbox claimed (stopping)
        # Left in error: the next sweep tries again (error sandboxes are sweepable).
        sandbox.transition(SandboxStatus.ERROR, f"auto-cleanup failed: {exc}")
        sandbox.save(update_fields=["status", "status_message", "status_changed_at"])
        raise BackendFailure(f"could not delete sandbox {sandbox.public_id}: {exc}") from exc
    with change():  # deleted, and its audit row, in one transaction
        sandbox.transition(SandboxStatus.DELETED, sandbox.status_message)
        sandbox.save()
