"""Pause, resume and stop a sandbox: keep it between working sessions without it holding CPU
(paused: frozen, memory kept) or memory (stopped: only its files kept).

Each is audited (sandbox.pause, sandbox.resume, sandbox.stop: one row per change), needs
write access, is counted against the team's quota for the state it enters (policy/quotas.py)
and changes the row atomically (housekeeping/transitions.py: a compare-and-set claim, the
host's call, a settlement; racing requests, delete included, get Conflict and change
nothing). Doing what is done already (pausing a paused sandbox) changes nothing and says so.

The rule for commands: a pause or stop while a foreground command runs (or a command is
being started) is refused with Conflict: wait for it, or cancel it. Background commands do
not hold either: a pause freezes them (their max_runtime_seconds counts wall time, so one
paused past it is killed as the sandbox resumes, and recorded timed_out), a stop ends them
(recorded cancelled, saying so). Previews stay open through both: a request to one
resumes the sandbox (its app is frozen with it; after a stop it must be started again).
"""

from __future__ import annotations

import time

from sandboxes.contract.errors import Conflict, NotFound
from sandboxes.contract.lifecycle import LifecycleChange
from sandboxes.contract.results import SandboxInfo
from sandboxes.housekeeping import transitions
from sandboxes.models import RESUMABLE_STATUSES, Sandbox, SandboxStatus
from sandboxes.policy import access, quotas, validation
from sandboxes.policy.access import WRITE
from sandboxes.services import waking
from sandboxes.services.jobs import keep_logs_before_stop
from tenants.auditing import audited, current, unaudited
from tenants.principal import Principal

S = SandboxStatus


@audited("sandbox.pause", "sandbox")
def pause_sandbox(principal: Principal, sandbox_id: str) -> LifecycleChange:
    """Freeze every process of the sandbox, keeping its memory; any later call on it (or
    resume_sandbox) resumes it in a moment. Counts against the team's paused quota."""
    sandbox = _sandbox(principal, sandbox_id, "pause sandboxes")
    if sandbox.status == S.PAUSED:
        return _unchanged(sandbox)
    _require(sandbox, {S.RUNNING}, "pause")
    transitions.claim(sandbox, S.PAUSING, "pausing", quotas.require_paused_room, idle=True)
    seconds = transitions.host_step(sandbox, lambda backend, state: backend.pause(state), "pause")
    current().details["seconds"] = round(seconds, 3)  # before the row settle() writes
    transitions.settle(sandbox, S.PAUSED)
    return _changed(sandbox, S.RUNNING, seconds)


@audited("sandbox.stop", "sandbox")
def stop_sandbox(principal: Principal, sandbox_id: str) -> LifecycleChange:
    """End every process of the sandbox (running or paused), keeping its files; any later
    call on it (or resume_sandbox) starts it again, its processes afresh. Its background
    commands end (cancelled). Counts against the team's stopped quota."""
    sandbox = _sandbox(principal, sandbox_id, "stop sandboxes")
    if sandbox.status == S.STOPPED:
        return _unchanged(sandbox)
    previous = sandbox.status
    _require(sandbox, {S.RUNNING, S.PAUSED}, "stop")
    jobs = list(
        sandbox.commands.filter(background=True, status="running").values_list("pk", flat=True)
    )
    transitions.claim(sandbox, S.HALTING, "stopping", quotas.require_stopped_room, idle=True)
    if jobs and previous == S.RUNNING:  # a frozen sandbox cannot be read
        keep_logs_before_stop(sandbox)
    seconds = transitions.host_step(sandbox, lambda backend, state: backend.stop(state), "stop")
    current().details["seconds"] = round(seconds, 3)  # before the row settle() writes
    if jobs:
        current().details["background_ended"] = jobs
    transitions.settle(sandbox, S.STOPPED)
    return _changed(sandbox, previous, seconds, jobs)


@audited("sandbox.resume", "sandbox")
def resume_sandbox(principal: Principal, sandbox_id: str) -> LifecycleChange:
    """Thaw a paused sandbox, or start a stopped one again; a running one is left as it is.
    Needs room among the team's running sandboxes. Under the team's pause policy the
    sandbox gets a fresh lifetime."""
    sandbox = _sandbox(principal, sandbox_id, "resume sandboxes", resuming=True)
    previous = sandbox.status
    if previous == S.RUNNING:
        return _unchanged(sandbox)
    if previous not in RESUMABLE_STATUSES | {S.RESUMING}:
        raise Conflict(_cannot(sandbox, "resume"))
    started = time.monotonic()
    # This call's own row (sandbox.resume) covers the step: it is not audited again.
    killed = waking.resume_or_wait(
        sandbox, lambda: unaudited(waking.resume_now)(principal, sandbox)
    )
    return _changed(sandbox, previous, time.monotonic() - started, killed)


def _sandbox(
    principal: Principal, sandbox_id: str, doing: str, *, resuming: bool = False
) -> Sandbox:
    current().target("sandbox", sandbox_id)
    validation.sandbox_id(sandbox_id)
    try:
        sandbox = access.get_sandbox(principal, sandbox_id, WRITE, doing)
    except NotFound:
        if resuming and _deleted_of_team(principal, sandbox_id):
            raise Conflict(
                f"sandbox {sandbox_id} was deleted: a deleted sandbox cannot be resumed "
                "(its files are gone); create a new one"
            ) from None
        raise
    current().details["from"] = sandbox.status
    return sandbox


def _deleted_of_team(principal: Principal, sandbox_id: str) -> bool:
    """A deleted sandbox of the principal's own team (another team's answers NotFound)."""
    if principal.team is None:
        return False
    return Sandbox.objects.filter(
        team=principal.team, public_id=sandbox_id, status=S.DELETED
    ).exists()


def _require(sandbox: Sandbox, allowed: set[str], doing: str) -> None:
    if sandbox.status not in allowed:
        raise Conflict(_cannot(sandbox, doing))


def _cannot(sandbox: Sandbox, doing: str) -> str:
    status = sandbox.status
    if status in (S.PAUSING, S.RESUMING, S.HALTING):
        return f"sandbox {sandbox.public_id} is {status} right now; try again in a moment"
    if status == S.STOPPED and doing == "pause":
        return f"sandbox {sandbox.public_id} is stopped: nothing runs to pause (resume it first)"
    return f"cannot {doing} sandbox {sandbox.public_id}: it is {status}"


def _unchanged(sandbox: Sandbox) -> LifecycleChange:
    current().details["unchanged"] = True
    return LifecycleChange(
        sandbox=SandboxInfo.from_model(sandbox),
        previous_status=sandbox.status,
        changed=False,
        seconds=None,
    )


def _changed(
    sandbox: Sandbox, previous: str, seconds: float, ended: list[int] | None = None
) -> LifecycleChange:
    return LifecycleChange(
        sandbox=SandboxInfo.from_model(sandbox),
        previous_status=previous,
        changed=True,
        seconds=round(seconds, 3),
        background_ended=ended or [],
    )
