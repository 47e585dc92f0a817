"""Background jobs over the per-command path: started, polled and cancelled by one exec each.

A job runs detached inside the sandbox, so it outlives the request that started it, the web
process and the worker that supervises it:

- a launcher (jobscripts.START) starts `setsid nohup sh -c RUNNER ...` with stdin from
  /dev/null and stdout and stderr to the job's log, and returns once the runner has written
  its pid; the job inherits the launcher's environment (the sandbox's and the call's), drops
  the exec marker (so no command's sweep touches it) and carries SANDHUB_JOB_ID;
- the runner leads a new session (its pid is the session and process group id), runs the
  command under coreutils `timeout` when a maximum runtime is given, keeps the log's head and
  last parts, and writes the exit code (and the end time) when it ends;
- a poll (jobscripts.POLL) reads the job's files, whatever the sandbox wrote into them: a
  JobStatus (with `problem` set), never an exception;
- a cancel (jobscripts.CANCEL) kills the job's whole session and its marked processes, with
  shell builtins only, as the exec's only process: a fork bomb keeps the pids limit used up,
  and dash exits on a failed fork, so a cancel that could not start, died on a failed fork
  or ran out of time is run again in a SIGKILL-only mode that never forks.

The files and scripts are the agent path's (agent/jobs.py): either path polls and cancels a
job the other started.
"""

from __future__ import annotations

import time
from typing import Any

from typing_extensions import Unpack

from hosts.backends.base import BackendError, JobStatus, SandboxGone
from hosts.backends.fallback.commands import INTERNAL_TIMEOUT, PlainCommands
from hosts.backends.joblaunch import job_launch, poll_args
from hosts.backends.jobscripts import (
    CANCEL,
    KILL_AFTER,
    POLL,
    RUNNER,
    START,
    parse_status,
)
from hosts.backends.options import JobOptions

__all__ = ["PlainJobs"]

_START_CAP = 16 * 1024
_CANCEL_ATTEMPTS = 10


class PlainJobs:
    """Background jobs of one host's sandboxes, run through `commands`."""

    def __init__(self, commands: PlainCommands) -> None:
        self.commands = commands

    def start_background(
        self, state: dict[str, Any], argv: list[str], **options: Unpack[JobOptions]
    ) -> dict[str, Any]:
        """Start argv detached (SandboxBackend.start_background); the job dict."""
        launch = job_launch(self.commands.place, state, argv, options)
        job_id = launch.job_id
        start = [START, "sandhub-start", job_id, *launch.runner_args, RUNNER, *argv]
        result = self.commands.script(state, *start, cap=_START_CAP, env=options["env"])
        if result.exit_code != 0:
            raise BackendError(f"could not start job {job_id}: {result.stderr or result.exit_code}")
        try:
            pid = int(result.stdout.decode().strip())
        except ValueError as exc:
            raise BackendError(f"job {job_id} reported no pid: {result.stdout[:200]!r}") from exc
        return launch.job(pid)

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        """Running or not, exit code, and the last tail_bytes of the job's log."""
        tail_bytes = max(int(tail_bytes), 0)
        result = self.commands.script(
            state, POLL, "sandhub-poll", *poll_args(job, tail_bytes), cap=tail_bytes + 1024
        )
        if result.exit_code != 0:
            raise BackendError(
                f"could not read job {job['job_id']}: {result.stderr or result.exit_code}"
            )
        return parse_status(result.stderr, result.stdout)

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        """SIGTERM to the job's session and marked processes, SIGKILL KILL_AFTER s later;
        idempotent. A run that could not start or died on a failed fork is tried again in
        CANCEL's fork-free kill mode."""
        args = [str(job["dir"]), str(job["job_id"]), str(job.get("pid") or "")]
        code, message = self._cancel(state, args, "term")
        for attempt in range(_CANCEL_ATTEMPTS):
            retry = code is None or "fork" in message.lower() or "unavailable" in message
            if code == 0 or not retry:
                break
            time.sleep(0.05 * attempt)
            code, message = self._cancel(state, args, "kill")
        if code != 0:
            raise BackendError(f"could not cancel job {job['job_id']}: {message or code}")

    def _cancel(self, state: dict[str, Any], args: list[str], mode: str) -> tuple[int | None, str]:
        """(exit code, stderr) of one CANCEL run; (None, why) when it could not run at all."""
        try:
            result = self.commands.script(
                state,
                CANCEL,
                "sandhub-cancel",
                *args,
                mode,
                cap=4096,
                timeout=INTERNAL_TIMEOUT + KILL_AFTER,
            )
        except SandboxGone:
            raise
        except BackendError as exc:  # no process could be made, or no answer in time
            return None, str(exc)
        return result.exit_code, result.stderr
