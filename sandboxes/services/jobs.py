"""Observing and recording background jobs: poll, kill, and store how each one ended, once.

The public services in background.py and the supervisor's background_tick use these.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from hosts.backends.base import BackendError, JobStatus, SandboxGone
from sandboxes.contract.outcomes import killed_for_memory
from sandboxes.contract.results import BackgroundCheck
from sandboxes.models import CommandExecution, CommandStatus, Sandbox, SandboxStatus
from sandboxes.services import masking
from sandboxes.services.common import backend_of, decode_output, mark_lost
from tenants.auditing import change, current

# The sandbox kills a job at its maximum runtime itself (coreutils timeout); the supervisor
# kills it this long after, in case that did not happen (a job that escaped its group, ...).
BACKGROUND_KILL_GRACE_SECONDS = 5.0
_ACTIVITY_EVERY = timedelta(seconds=30)  # how often a running job refreshes last_activity_at
_EXIT_CODES = (-(2**31), 2**31 - 1)  # what the exit_code column holds


def _job(execution: CommandExecution) -> dict[str, Any]:
    return (execution.background_state or {}).get("job") or {}


def poll(execution: CommandExecution, sandbox: Sandbox, tail_bytes: int) -> JobStatus:
    """The job as the sandbox sees it; a vanished container ends the command (and sandbox)."""
    try:
        return backend_of(sandbox).poll_background(
            sandbox.backend_state, _job(execution), tail_bytes
        )
    except SandboxGone as exc:
        _vanished(execution, sandbox, exc)
        raise


def _vanished(execution: CommandExecution, sandbox: Sandbox, exc: SandboxGone) -> None:
    record_background_end(execution, CommandStatus.ERROR, f"the sandbox vanished: {exc}")
    if Sandbox.objects.filter(pk=sandbox.pk, status=SandboxStatus.RUNNING).exists():
        mark_lost(sandbox, str(exc))


def observe(execution: CommandExecution, sandbox: Sandbox, tail_bytes: int) -> JobStatus | None:
    """Poll a running command; record its end if it came. None when the sandbox vanished."""
    try:
        status = poll(execution, sandbox, tail_bytes)
    except SandboxGone:
        return None
    if not status.running:
        record_from_status(execution, sandbox, status)
    return status


def kill_and_record(
    execution: CommandExecution, sandbox: Sandbox, tail_bytes: int
) -> JobStatus | None:
    backend = backend_of(sandbox)
    try:
        backend.cancel_background(sandbox.backend_state, _job(execution))
    except SandboxGone as exc:
        _vanished(execution, sandbox, exc)
        raise
    status = poll(execution, sandbox, tail_bytes)
    record_from_status(execution, sandbox, status)
    return status


def overdue(execution: CommandExecution) -> bool:
    limit = execution.timeout_seconds + BACKGROUND_KILL_GRACE_SECONDS
    return _elapsed(execution) > limit


def _elapsed(execution: CommandExecution) -> float:
    if execution.started_at is None:
        return 0.0
    return (timezone.now() - execution.started_at).total_seconds()


def record_from_status(execution: CommandExecution, sandbox: Sandbox, status: JobStatus) -> None:
    """Record the end the sandbox reports, with the log's tail up to the output cap.

    BackendError, and nothing recorded, if the log cannot be read now (its host restarting,
    a connection cut): the end and the log stay in the sandbox, and the next look (the
    supervisor's next tick, a check) records both. Recording the end without its output
    would lose the output for good: a finished row is never written again.
    """
    status_name, message = _background_outcome(execution, status)
    final = status
    cap = settings.SANDHUB_OUTPUT_CAP_BYTES
    if len(status.output) < min(cap, status.output_bytes):
        final = poll(execution, sandbox, cap)  # a vanished sandbox ends the row there
    record_background_end(
        execution,
        status_name,
        message,
        exit_code=status.exit_code,
        output=final.output,
        output_bytes=max(final.output_bytes, status.output_bytes),
        elapsed=status.elapsed_seconds,
    )


def _background_outcome(execution: CommandExecution, status: JobStatus) -> tuple[str, str]:
    """(status, message) from how the job ended; a kill at or past the maximum runtime is a
    timeout whoever did it (the sandbox's own timeout, or the supervisor as a backstop)."""
    elapsed = status.elapsed_seconds if status.elapsed_seconds is not None else _elapsed(execution)
    limit = execution.timeout_seconds
    timed_out = f"killed after its maximum runtime of {limit:g} s"
    if status.cancelled:
        if elapsed >= limit:
            return CommandStatus.TIMED_OUT, timed_out
        return CommandStatus.CANCELLED, "cancelled"
    if status.exit_code is None:
        # A backend may say what was wrong (e.g. an exit file the sandbox overwrote).
        problem = status.problem
        return CommandStatus.ERROR, problem or (
            "the command's processes vanished without an exit code (was the sandbox restarted?)"
        )
    if status.exit_code in (124, 137) and elapsed >= limit:
        return CommandStatus.TIMED_OUT, timed_out
    return (CommandStatus.SUCCEEDED if status.exit_code == 0 else CommandStatus.FAILED), ""


def record_background_end(
    execution: CommandExecution,
    status: str,
    message: str,
    *,
    exit_code: int | None = None,
    output: bytes = b"",
    output_bytes: int = 0,
    elapsed: float | None = None,
) -> bool:
    """Store the end once: only a row still running changes. The row is refreshed either way.

    Numbers come from the sandbox: what no column can hold is not stored (an exit code out of
    range as None, an elapsed time that is no finite number as the time the row has run).
    """
    if exit_code is not None and not _EXIT_CODES[0] <= exit_code <= _EXIT_CODES[1]:
        exit_code = None
    if elapsed is None or not math.isfinite(elapsed) or elapsed < 0:
        elapsed = _elapsed(execution)
    # A cancel's change: its audit row goes in the same transaction (elsewhere: a transaction).
    with change():
        updated = CommandExecution.objects.filter(
            pk=execution.pk, status=CommandStatus.RUNNING
        ).update(
            status=status,
            exit_code=exit_code,
            stdout=_masked(execution, decode_output(output)),
            stderr="",
            stdout_bytes=output_bytes,
            stdout_truncated=output_bytes > len(output),
            stderr_bytes=0,
            stderr_truncated=False,
            duration_seconds=elapsed,
            finished_at=timezone.now(),
            error_message=message[:2000],
        )
        execution.refresh_from_db()
        # A cancel's row says how the command ended: here, or first by its supervisor.
        current().details["status"] = execution.status
    return updated == 1


def keep_active(sandbox: Sandbox) -> None:
    """A running job keeps its sandbox active; one write per _ACTIVITY_EVERY, not per poll."""
    now = timezone.now()
    Sandbox.objects.filter(pk=sandbox.pk, last_activity_at__lt=now - _ACTIVITY_EVERY).update(
        last_activity_at=now
    )


def background_check(
    execution: CommandExecution,
    live: JobStatus | None,
    tail_lines: int,
    *,
    note: str = "",
    resumed_seconds: float | None = None,
) -> BackgroundCheck:
    """The command as check_background and cancel_background show it; `note` stands in for
    an error message while it runs (why it could not be looked at live)."""
    running = execution.status == CommandStatus.RUNNING
    if running and live is not None:
        text, total = _masked(execution, decode_output(live.output)), live.output_bytes
        cut = total > len(live.output)
    else:
        text, total, cut = execution.stdout, execution.stdout_bytes, execution.stdout_truncated
    lines = text.splitlines(keepends=True)
    if cut and len(lines) > 1:
        lines = lines[1:]  # the first is the end of a longer line
    shown = lines[-tail_lines:] if tail_lines else []
    elapsed = _elapsed(execution) if running else execution.duration_seconds
    return BackgroundCheck(
        id=execution.pk,
        sandbox_id=execution.sandbox.public_id,
        command=execution.command,
        status=execution.status,
        running=running,
        exit_code=execution.exit_code if not running else None,
        output="".join(shown),
        output_truncated=cut or len(shown) < len(lines),
        output_bytes=total,
        elapsed_seconds=elapsed,
        max_runtime_seconds=execution.timeout_seconds,
        log_path=_job(execution).get("log", ""),
        error_message=execution.error_message or (note if running else ""),
        started_at=execution.started_at,
        finished_at=execution.finished_at,
        resumed_seconds=resumed_seconds,
        out_of_memory=not running and killed_for_memory(execution.exit_code, text),
    )


def keep_logs_before_stop(sandbox: Sandbox) -> None:
    """A stop ends every job, and on Docker empties their files with the container's memory
    (names.JOBS_DIR): first keep each running job's log tail in its row, as its end would
    (the stop then records it cancelled). Best effort: a job that cannot be read keeps none."""
    cap = settings.SANDHUB_OUTPUT_CAP_BYTES
    backend = backend_of(sandbox)
    running = sandbox.commands.filter(background=True, status=CommandStatus.RUNNING)
    for execution in running:
        try:
            status = backend.poll_background(sandbox.backend_state, _job(execution), cap)
        except BackendError:
            continue
        CommandExecution.objects.filter(pk=execution.pk, status=CommandStatus.RUNNING).update(
            stdout=_masked(execution, decode_output(status.output)),
            stdout_bytes=status.output_bytes,
            stdout_truncated=status.output_bytes > len(status.output),
        )


def _masked(execution: CommandExecution, text: str) -> str:
    """A job's output as it is recorded and shown: stored secrets' values masked."""
    return masking.masker(execution.sandbox.team_id).text(text)
