"""Pause, resume and stop of one sandbox, as the services and the sweep do them: a claim, a
call to its host, a settlement. No database lock is held across the host's call.

1. Claim: one short transaction locks the team's row (quotas.py: the room the new state
   needs is counted there, so two claims cannot both take the last place) and moves the
   sandbox into pausing, resuming or halting with a compare-and-set on the status it was
   read in (Sandbox.transition_if). Exactly one of several racing requests (pause, resume,
   stop, delete, the sweep) wins; the others get Conflict and change nothing. A pause or
   stop also requires, in the same statement, that no foreground command runs and no
   command is being started (BUSY); run_command checks the other way round after
   recording its command (`still_running`), so one of the two always sees the other.
2. The host's call (SandboxBackend.pause / resume / stop / start), with nothing locked.
3. Settle: a compare-and-set from the claim to the new state, in the caller's change()
   (its audit row in the same transaction). A host call that failed settles the row to
   what the host says the sandbox is (running, paused, stopped; missing: lost; no answer:
   error), so the row never claims what the host did not do.

A claim left by a process that died mid-way is settled by reconciliation (reconcile.py).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from dbkit.prepared import PreparedRead
from hosts.backends import get_backend
from hosts.backends.base import BackendError, SandboxBackend, SandboxGone, Unsupported
from sandboxes.contract.errors import BackendFailure, Conflict
from sandboxes.models import (
    CommandExecution,
    CommandStatus,
    Sandbox,
    SandboxStatus,
    Snapshot,
    SnapshotStatus,
)
from sandboxes.policy import quotas
from tenants.auditing import change
from tenants.models import IdleAction, Team

S = SandboxStatus
Room = Callable[[Team, Sandbox], None]
# The host's word for a sandbox, as a status (SandboxBackend.status).
_HOST_SAYS = {"running": S.RUNNING, "paused": S.PAUSED, "stopped": S.STOPPED, "missing": S.LOST}
STOPPED_JOB_MESSAGE = (
    "ended by a stop of its sandbox (a stop ends every process; the sandbox's files, this "
    "job's log among them, are kept)"
)


def busy_commands() -> Q:
    """A foreground command runs, any command is being started, or a snapshot of the sandbox
    is being taken (it pauses and unpauses the container itself): no pause nor stop now."""
    busy = CommandExecution.objects.filter(sandbox=OuterRef("pk")).filter(
        Q(status=CommandStatus.QUEUED) | Q(status=CommandStatus.RUNNING, background=False)
    )
    snapping = Snapshot.objects.filter(source=OuterRef("pk"), status=SnapshotStatus.CREATING)
    return Q(Exists(busy)) | Q(Exists(snapping))


def claim(
    sandbox: Sandbox,
    claiming: str,
    message: str,
    room: Room | None,
    *,
    idle: bool,
    still: Q | None = None,
) -> None:
    """Move the sandbox from the status it was read in to `claiming` (pausing, resuming,
    halting), within its team's quota (`room`); `idle`: only while no command is busy;
    `still`: only while the row still matches it (the sweep's idleness, say). Conflict when
    another request got there first, or a command is busy; nothing changes."""
    seen = sandbox.status
    condition = ~busy_commands() if idle else None
    if still is not None:
        condition = still if condition is None else condition & still
    with transaction.atomic():
        if room is not None:
            room(quotas.locked_team(sandbox.team_id), sandbox)
        won = sandbox.transition_if(claiming, message, condition)
    if not won:
        raise Conflict(_lost_claim(sandbox, seen, claiming))


_DOING: dict[str, str] = {S.PAUSING: "pause", S.HALTING: "stop", S.RESUMING: "resume"}


def _lost_claim(sandbox: Sandbox, seen: str, claiming: str) -> str:
    now = Sandbox.objects.filter(pk=sandbox.pk).values_list("status", flat=True).first()
    doing = _DOING.get(claiming, claiming)
    if now == seen and claiming != S.RESUMING:
        return (
            f"a command is running in sandbox {sandbox.public_id} (or starting), or a snapshot "
            f"of it is being taken: wait for it to finish or cancel it, then {doing} "
            f"(background commands do not hold a {doing})"
        )
    return f"sandbox {sandbox.public_id} changed meanwhile (it is {now} now); try again"


def host_step(sandbox: Sandbox, step: Callable[[SandboxBackend, dict], None], doing: str) -> float:
    """Run `step` on the sandbox's host; the seconds it took. On failure the row is settled
    to what the host says, and the error raised as BackendFailure (Conflict when the host
    cannot do it at all)."""
    if sandbox.host is None:
        raise BackendFailure(f"sandbox {sandbox.public_id} has no host")
    backend = get_backend(sandbox.host)
    started = time.monotonic()
    before = copy.deepcopy(sandbox.backend_state)
    try:
        step(backend, sandbox.backend_state)
        if sandbox.backend_state != before:
            # A start may give the container a new address (the egress proxy finds the
            # sandbox by it): the row must say what the host says now.
            Sandbox.objects.filter(pk=sandbox.pk).update(backend_state=sandbox.backend_state)
    except BackendError as exc:
        _settle_failed(sandbox, backend, f"{doing} failed: {exc}", exc)
        if isinstance(exc, Unsupported):
            raise Conflict(f"cannot {doing} sandbox {sandbox.public_id}: {exc}") from exc
        raise BackendFailure(f"could not {doing} sandbox {sandbox.public_id}: {exc}") from exc
    return time.monotonic() - started


def _settle_failed(
    sandbox: Sandbox, backend: SandboxBackend, message: str, exc: BackendError
) -> None:
    settled = S.LOST if isinstance(exc, SandboxGone) else host_status(backend, sandbox)
    sandbox.transition_if(settled, "" if isinstance(exc, Unsupported) else message[:2000])


def host_status(backend: SandboxBackend, sandbox: Sandbox) -> str:
    """The status the host's own answer means; error when it cannot say."""
    try:
        return _HOST_SAYS.get(backend.status(sandbox.backend_state), S.ERROR)
    except BackendError:
        return S.ERROR


def settle(sandbox: Sandbox, to: str, *, resumed: bool = False) -> None:
    """From the claim to `to`, with the caller's audit row (change()); on a resume, the
    team's pause policy gives the sandbox a fresh lifetime, and its idle time starts again.
    Conflict if the claim was taken from under it (a reconciliation that found it gone)."""
    claimed = sandbox.status
    with change():
        if not sandbox.transition_if(to):
            now = Sandbox.objects.filter(pk=sandbox.pk).values_list("status", flat=True).first()
            raise Conflict(f"sandbox {sandbox.public_id} is {now} now (it was {claimed})")
        if resumed:
            _restart_clocks(sandbox)
        if to == S.STOPPED:
            end_background_jobs(sandbox)


def _restart_clocks(sandbox: Sandbox) -> None:
    now = timezone.now()
    fields: dict[str, object] = {"last_activity_at": now}
    if sandbox.team.idle_action == IdleAction.PAUSE:
        minutes = lifetime_minutes(sandbox)
        fields |= {
            "lifetime_minutes": minutes,
            "lifetime_started_at": now,
            "expires_at": now + timedelta(minutes=minutes),
        }
    Sandbox.objects.filter(pk=sandbox.pk).update(**fields)
    for name, value in fields.items():
        setattr(sandbox, name, value)


def lifetime_minutes(sandbox: Sandbox) -> int:
    """The lifetime the sandbox was given (older rows: from its creation to its expiry)."""
    if sandbox.lifetime_minutes:
        return sandbox.lifetime_minutes
    start = sandbox.lifetime_started_at or sandbox.created_at
    if sandbox.expires_at is None:
        return sandbox.team.default_lifetime_minutes
    return max(1, round((sandbox.expires_at - start).total_seconds() / 60))


def end_background_jobs(sandbox: Sandbox) -> int:
    """Background commands still recorded as running end with the stop (it killed them)."""
    now = timezone.now()
    return CommandExecution.objects.filter(
        sandbox=sandbox, background=True, status=CommandStatus.RUNNING
    ).update(
        status=CommandStatus.CANCELLED,
        error_message=STOPPED_JOB_MESSAGE,
        finished_at=now,
    )


def cancel_overdue_jobs(sandbox: Sandbox) -> list[int]:
    """After a resume from pause: kill the background commands whose maximum runtime (wall
    time, pauses included) passed while they were frozen. Their own timeout fires as they
    thaw as well; this makes it certain. Whoever looks next (check_background, the
    supervisor) records them timed out."""
    overdue = []
    running = CommandExecution.objects.filter(
        sandbox=sandbox, background=True, status=CommandStatus.RUNNING
    )
    now = timezone.now()
    for job in running:
        if job.started_at and (now - job.started_at).total_seconds() > job.timeout_seconds:
            overdue.append(job)
    if not overdue or sandbox.host is None:
        return []
    backend = get_backend(sandbox.host)
    for job in overdue:
        try:
            backend.cancel_background(sandbox.backend_state, (job.background_state or {})["job"])
        except (BackendError, KeyError):
            continue  # its own timeout and the supervisor's kill remain
    return [job.pk for job in overdue]


# A command's read of its sandbox after recording itself: compiled once (run on every one).
_running_row: PreparedRead[Sandbox] = PreparedRead(
    lambda pk: Sandbox.objects.filter(pk=pk, status=S.RUNNING).only("pk").order_by()[:1],
    -1_734_028_197,
)


def still_running(sandbox: Sandbox) -> bool:
    """Whether the sandbox is still running, read after a command recorded itself as running
    (or queued): the other half of the claim's BUSY check (see the module's docstring)."""
    return _running_row.first(sandbox.pk) is not None
