"""Background commands.

start_background starts the command detached in the sandbox (the backend's job: a session of
its own, a log file and an exit-code file in the sandbox) and returns at once with the
CommandExecution id as the task id. sandboxes/tasks.py supervises it through
`background_tick`: polls it, kills it past its maximum runtime, records its end.
check_background and cancel_background act on the sandbox live, so they answer right even
while no worker runs. Whichever of them sees the end first records it, once (a conditional
update on status=running), and the others leave it be.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from hosts.backends.base import BackendError, SandboxGone
from sandboxes.contract.errors import (
    BackendFailure,
    Conflict,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from sandboxes.contract.results import BackgroundCheck, CommandResult
from sandboxes.housekeeping import liveness
from sandboxes.models import CommandExecution, CommandStatus, Sandbox, SandboxStatus
from sandboxes.policy import access, validation
from sandboxes.policy.access import READ, WRITE
from sandboxes.services import masking
from sandboxes.services.commands import fail_execution, refuse_if_paused_meanwhile
from sandboxes.services.common import backend_of, running_sandbox, touch
from sandboxes.services.jobs import (
    background_check,
    keep_active,
    kill_and_record,
    observe,
    overdue,
    poll,
    record_background_end,
    record_from_status,
)
from tenants.auditing import AUDIT_VIEW, audited, change, current
from tenants.principal import Principal

logger = logging.getLogger(__name__)

BACKGROUND_TAIL_BYTES = 64 * 1024  # read for a check; the final record keeps up to the cap
MAX_TAIL_LINES = 10_000
MAX_BACKGROUND_PER_SANDBOX = 10


@audited("command.background.start", "sandbox")
def start_background(
    principal: Principal,
    sandbox_id: str,
    command: str,
    *,
    cwd: str = validation.WORKSPACE,
    env: dict[str, str] | None = None,
    max_runtime_seconds: float | None = None,
) -> CommandResult:
    """Start a shell command (bash -c) detached in the sandbox and return at once.

    The result's id is the task id for check_background / cancel_background. The command is
    killed inside the sandbox after max_runtime_seconds (default: the platform's maximum).
    """
    current().target("sandbox", sandbox_id)
    command = validation.command(command)
    cwd = validation.path(cwd, "cwd")
    exec_env = validation.env(env)
    max_runtime = validation.timeout(
        settings.SANDHUB_MAX_TIMEOUT_SECONDS
        if max_runtime_seconds is None
        else max_runtime_seconds,
        "max_runtime_seconds",
    )
    sandbox = running_sandbox(principal, sandbox_id, WRITE, "run commands")
    shown = masking.masker(sandbox.team_id).text(command)  # what is recorded (run: command)
    with transaction.atomic():
        # The count and the insert are one step for concurrent starts in the same sandbox:
        # PostgreSQL locks the sandbox's row until the commit; SQLite runs one write
        # transaction at a time (settings: BEGIN IMMEDIATE), which is the same lock.
        list(Sandbox.objects.select_for_update().filter(pk=sandbox.pk).values_list("pk"))
        _check_background_limit(sandbox)
        execution = CommandExecution.objects.create(
            sandbox=sandbox,
            actor=principal.user,
            channel=principal.channel,
            kind="command",
            command=shown,
            cwd=cwd,
            timeout_seconds=max_runtime,
            status=CommandStatus.QUEUED,
            background=True,
            started_at=timezone.now(),
            lease_id=liveness.current_lease_id(),  # closed at once if this process dies
        )
    current().details.update(
        {"command_id": execution.pk, "command": shown[:500], "max_runtime_seconds": max_runtime}
    )
    refuse_if_paused_meanwhile(execution, sandbox)
    # Unique within the sandbox even if ids restart (a restored database): it names the
    # job's directory and marks its processes.
    job_id = f"{execution.pk}-{secrets.token_hex(4)}"
    try:
        job = backend_of(sandbox).start_background(
            sandbox.backend_state,
            ["bash", "-c", command],
            cwd=cwd,
            env={**sandbox.env, **exec_env},
            job_id=job_id,
            timeout=max_runtime,
        )
    except BackendError as exc:
        fail_execution(execution, sandbox, exc, 0.0)
        raise BackendFailure(f"command could not start in sandbox {sandbox_id}: {exc}") from exc
    with change():  # running, and its audit row, in one transaction
        execution.status = CommandStatus.RUNNING
        execution.background_state = {"job": job}
        queued = CommandExecution.objects.filter(pk=execution.pk, status=CommandStatus.QUEUED)
        if not queued.update(status=execution.status, background_state=execution.background_state):
            _closed_meanwhile(sandbox, execution, job)  # never brought back to running
        pk = execution.pk
        # After commit, so the worker finds the row (a caller may hold a transaction open).
        transaction.on_commit(
            lambda: async_task(
                "sandboxes.tasks.supervise_background", pk, task_name=f"supervise-background-{pk}"
            )
        )
        touch(sandbox)
        current().details.update({"status": execution.status, "log": job.get("log", "")})
    return CommandResult.from_model(execution)


def _check_background_limit(sandbox: Sandbox) -> None:
    running = sandbox.commands.filter(
        background=True, status__in=[CommandStatus.QUEUED, CommandStatus.RUNNING]
    ).count()
    if running >= MAX_BACKGROUND_PER_SANDBOX:
        raise QuotaExceeded(
            f"at most {MAX_BACKGROUND_PER_SANDBOX} background commands run at once in a "
            f"sandbox ({running} running); wait for one or cancel it"
        )


@audited("command.background.check", "sandbox", kind=AUDIT_VIEW)
def check_background(
    principal: Principal, sandbox_id: str, command_id: int, *, tail_lines: int = 50
) -> BackgroundCheck:
    """Running or not, exit code, the last tail_lines lines of output, elapsed time.

    Reads the sandbox live while the command runs (and records its end if it came).
    """
    current().target("sandbox", sandbox_id)
    validation.positive_int(command_id, "command id", minimum=1)
    validation.positive_int(tail_lines, "tail_lines", minimum=0, maximum=MAX_TAIL_LINES)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see background commands")
    execution = _background_execution(sandbox, command_id)
    live = None
    if execution.status == CommandStatus.RUNNING and sandbox.status != SandboxStatus.RUNNING:
        # Paused (its agent frozen: a look would wait for a resume) or on its way there: told
        # from the row, without waking the sandbox for a look.
        current().details.update({"command_id": execution.pk, "status": execution.status})
        return background_check(
            execution,
            None,
            tail_lines,
            note=f"the sandbox is {sandbox.status}: "
            "the command is frozen with it until it resumes (any call on the sandbox does)",
        )
    if execution.status == CommandStatus.RUNNING:
        tail = BACKGROUND_TAIL_BYTES if tail_lines else 0
        try:
            live = observe(execution, sandbox, tail)
        except BackendError as exc:
            raise BackendFailure(
                f"could not check command {command_id} in sandbox {sandbox_id}: {exc}"
            ) from exc
    touch(sandbox)
    check = background_check(execution, live, tail_lines)
    current().details.update({"command_id": execution.pk, "status": check.status})
    return check


@audited("command.background.cancel", "sandbox")
def cancel_background(principal: Principal, sandbox_id: str, command_id: int) -> BackgroundCheck:
    """Kill every process of the command (SIGTERM, SIGKILL 2 s later) and record it cancelled.

    Cancelling a command that has already ended changes nothing and says how it ended.
    """
    current().target("sandbox", sandbox_id)
    validation.positive_int(command_id, "command id", minimum=1)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "cancel commands")
    execution = _background_execution(sandbox, command_id)
    current().details.update({"command_id": execution.pk, "was": execution.status})
    live = None
    if execution.status == CommandStatus.RUNNING:
        # A frozen job cannot be killed: the sandbox resumes first (and a stopped one's
        # jobs have ended already).
        sandbox = running_sandbox(principal, sandbox_id, WRITE, "cancel commands")
        execution.refresh_from_db()
    if execution.status == CommandStatus.RUNNING:
        try:
            live = kill_and_record(execution, sandbox, BACKGROUND_TAIL_BYTES)
        except BackendError as exc:
            raise BackendFailure(
                f"could not cancel command {command_id} in sandbox {sandbox_id}: {exc}"
            ) from exc
    touch(sandbox)
    check = background_check(execution, live, 50, resumed_seconds=sandbox.resumed_seconds)
    current().details["status"] = check.status
    return check


def background_tick(principal: Principal, command_id: int) -> bool:
    """One look at a running background command, for its supervisor (sandboxes.tasks).

    Records the end if it came, kills the command once it is past its maximum runtime, keeps
    its sandbox active while it runs. True when nothing is left to supervise. A host that does
    not answer is not an end: the next look tries again (the sandbox enforces the maximum
    runtime on its own meanwhile). No audit row: it runs every second or two.
    """
    if not access.is_platform_admin(principal):
        raise PermissionDenied("only the system supervises background commands")
    execution = (
        CommandExecution.objects.select_related("sandbox__host").filter(pk=command_id).first()
    )
    if execution is None or execution.status != CommandStatus.RUNNING:
        return True
    sandbox = execution.sandbox
    if sandbox.status in _FROZEN_OR_ENDING:
        # Frozen (nothing to look at: a look through its frozen agent would wait), or being
        # stopped (the stop records its end). After a resume, recover_background brings a
        # supervisor back within a minute; check_background looks at once.
        return True
    if sandbox.status == SandboxStatus.RESUMING:
        return False  # running again in a moment
    if sandbox.status != SandboxStatus.RUNNING:
        # Deleted, lost, stopped or being deleted: the job went (or goes) with its processes.
        record_background_end(
            execution, CommandStatus.ERROR, f"the sandbox is {sandbox.status}; the command ended"
        )
        return True
    try:
        if overdue(execution):
            # Kill before looking: a job that has used up the pids limit cannot be polled,
            # but the kill gets in (and one that ended meanwhile is recorded as it ended).
            kill_and_record(execution, sandbox, 0)
            return True
        status = poll(execution, sandbox, 0)
        if status.running:
            keep_active(sandbox)
            return False
        record_from_status(execution, sandbox, status)
        return True
    except SandboxGone:
        return True  # _poll recorded it
    except BackendError as exc:
        logger.warning("background command %s: %s; trying again", command_id, exc)
        return False


_FROZEN_OR_ENDING = frozenset({SandboxStatus.PAUSING, SandboxStatus.PAUSED, SandboxStatus.HALTING})


def _background_execution(sandbox: Sandbox, command_id: int) -> CommandExecution:
    execution = (
        sandbox.commands.select_related("sandbox", "actor")
        .filter(pk=command_id, background=True)
        .first()
    )
    if execution is None:
        raise NotFound(f"background command {command_id} not found in sandbox {sandbox.public_id}")
    return execution


def _closed_meanwhile(sandbox: Sandbox, execution: CommandExecution, job: dict[str, Any]) -> None:
    """This process stopped past its liveness lease while starting the job, and its row was
    closed (housekeeping/liveness.py): the job goes, the closed row stays as it is."""
    with contextlib.suppress(BackendError):
        backend_of(sandbox).cancel_background(sandbox.backend_state, job)
    raise Conflict(
        f"background command {execution.pk} was recorded as abandoned while it started "
        "(this platform process had stopped renewing its liveness lease); it was cancelled"
    )
