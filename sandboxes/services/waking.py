"""Resuming a paused or stopped sandbox: explicitly (resume_sandbox), and on the way of any
call that needs it running (common.running_sandbox: a command, a file call, a background
start; previews_access: a preview request, once authorized).

A resume on the way is part of the call it serves and authorized as that call is (a reader's
file read resumes too); it is its own change with its own audit row (sandbox.resume, with
the call it served), and the call's result says how long it took (resumed_seconds, from
Sandbox.resumed_seconds). It needs room among the team's running sandboxes, like a create.
Deleted, failed and lost sandboxes are never resumed; one being paused or stopped right now
is refused (try again); one being resumed by another call is waited for.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sandboxes.contract.errors import Conflict
from sandboxes.housekeeping import transitions
from sandboxes.models import RESUMABLE_STATUSES, Sandbox, SandboxStatus
from sandboxes.policy import quotas
from tenants.auditing import audited, current
from tenants.principal import Principal

S = SandboxStatus
# How long a call waits for another call's resume of the same sandbox (a stopped Docker
# sandbox starts in about a second; an SSH one in a few).
RESUME_WAIT_SECONDS = 60.0
_POLL_SECONDS = 0.05


def wake(principal: Principal, sandbox: Sandbox, doing: str) -> None:
    """Make the sandbox (the principal's, authorized for `doing`) running, resuming it if it
    is paused or stopped; Conflict for any status it cannot run from."""
    if sandbox.status == S.RUNNING:
        return
    served = current().action or doing
    resume_or_wait(sandbox, lambda: resume_now(principal, sandbox, served=served))


def resume_or_wait(sandbox: Sandbox, resume: Callable[[], list[int]]) -> list[int]:
    """resume() a paused or stopped sandbox, or wait for the call that resumes it now; what
    resume() returns (nothing when it was another call's)."""
    if sandbox.status in RESUMABLE_STATUSES:
        try:
            return resume()
        except Conflict:
            sandbox.refresh_from_db()  # another call's resume won the claim: wait for it
            if sandbox.status not in (S.RESUMING, S.RUNNING):
                raise
    if sandbox.status in (S.RESUMING, S.RUNNING):
        _wait_for_resume(sandbox)
        return []
    raise Conflict(_not_running(sandbox))


def _not_running(sandbox: Sandbox) -> str:
    if sandbox.status in (S.PAUSING, S.HALTING):
        doing = "paused" if sandbox.status == S.PAUSING else "stopped"
        return f"sandbox {sandbox.public_id} is being {doing} right now; try again in a moment"
    return f"sandbox {sandbox.public_id} is {sandbox.status}, not running"


@audited("sandbox.resume", "sandbox")
def resume_now(principal: Principal, sandbox: Sandbox, *, served: str = "") -> list[int]:
    """Resume a paused or stopped sandbox (the caller checked the principal may); sets its
    resumed_seconds; the background commands it killed (overdue after a pause)."""
    draft = current()
    draft.target("sandbox", sandbox.public_id)
    previous = sandbox.status
    draft.details.update({"from": previous, **({"for": served} if served else {})})
    started = time.monotonic()
    transitions.claim(
        sandbox, S.RESUMING, f"resuming from {previous}", quotas.require_running_room, idle=False
    )
    if previous == S.PAUSED:
        step = transitions.host_step(
            sandbox, lambda backend, state: backend.resume(state), "resume"
        )
        # Killed while the row still says resuming: no command can start on it yet.
        killed = transitions.cancel_overdue_jobs(sandbox)
    else:
        step = transitions.host_step(sandbox, lambda backend, state: backend.start(state), "start")
        killed = []
    draft.details["seconds"] = round(step, 3)  # before the row settle() writes
    if killed:
        draft.details["background_timed_out"] = killed
    transitions.settle(sandbox, S.RUNNING, resumed=True)
    sandbox.resumed_seconds = round(time.monotonic() - started, 3)
    return killed


def _wait_for_resume(sandbox: Sandbox) -> None:
    """Another call resumes it: wait for that, then carry on with the row as it is now."""
    started = time.monotonic()
    deadline = started + RESUME_WAIT_SECONDS
    while True:
        sandbox.refresh_from_db()
        if sandbox.status == S.RUNNING:
            sandbox.resumed_seconds = round(time.monotonic() - started, 3)
            return
        if sandbox.status != S.RESUMING:
            raise Conflict(f"sandbox {sandbox.public_id} did not resume: {_not_running(sandbox)}")
        if time.monotonic() > deadline:
            raise Conflict(
                f"sandbox {sandbox.public_id} is still resuming after "
                f"{RESUME_WAIT_SECONDS:g} s; try again later"
            )
        time.sleep(_POLL_SECONDS)
