"""A background job's launch and its job dict, the same on the agent path (agent/jobs.py) and
the per-command path (fallback/jobs.py), so either polls and cancels a job the other started:
where its files go, how much of its log is kept, RUNNER's and POLL's arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from hosts.backends.jobscripts import check_job
from hosts.backends.options import JobOptions
from hosts.backends.place import SandboxPlace

DEFAULT_LOG_KEEP_BYTES = 4 * 1024 * 1024
_LOG_KEEP_RANGE = (64 * 1024, 256 * 1024 * 1024)  # a part per fork: not too small
# A cancel: SIGTERM, KILL_AFTER s of grace, then the sweep (up to its own 10 s limit).
CANCEL_TIMEOUT = 30.0


def log_keep_bytes() -> int:
    """How much of a job's log is kept from its start and from its end (fixed per job)."""
    low, high = _LOG_KEEP_RANGE
    value = getattr(settings, "SANDHUB_JOB_LOG_KEEP_BYTES", DEFAULT_LOG_KEEP_BYTES)
    return min(max(int(value), low), high)


def runner_args(directory: str, cwd: str, timeout: float | None, keep: int) -> list[str]:
    """RUNNER's arguments after its name: the job's directory, working directory, time limit
    (0: none) and log keep; the command's argv follows them."""
    limit = "0" if timeout is None else f"{timeout:.3f}"
    return [directory, cwd, limit, str(keep)]


def job_dict(
    job_id: str, directory: str, pid: int, timeout: float | None, keep: int
) -> dict[str, Any]:
    """What a later call needs of a job, in any process, whichever path started it."""
    return {
        "job_id": job_id,
        "dir": directory,
        "log": f"{directory}/log",
        "pid": pid,  # = process group id = session id
        "timeout": timeout,
        "log_keep": keep,  # 0 (or missing, for jobs started before): one uncapped log
    }


@dataclass(frozen=True)
class JobLaunch:
    """What starting a job takes, on either path: its id and time limit, its directory and
    log keep, and RUNNER's arguments (the command's argv follows them)."""

    job_id: str
    timeout: float | None
    directory: str
    keep: int
    runner_args: list[str]

    def job(self, pid: int) -> dict[str, Any]:
        return job_dict(self.job_id, self.directory, pid, self.timeout, self.keep)


def job_launch(
    place: SandboxPlace, state: dict[str, Any], argv: list[str], options: JobOptions
) -> JobLaunch:
    """Check a job's start (InvalidInput-like BackendErrors) and lay it out in the sandbox."""
    job_id, timeout = options["job_id"], options.get("timeout")
    check_job(argv, job_id, timeout)
    directory = place.job_dir(state, job_id)
    keep = log_keep_bytes()
    args = runner_args(directory, place.host_path(state, options["cwd"]), timeout, keep)
    return JobLaunch(job_id, timeout, directory, keep, args)


def poll_args(job: dict[str, Any], tail_bytes: int) -> list[str]:
    """POLL's arguments for a job dict."""
    return [
        str(job["dir"]),
        str(job["job_id"]),
        str(job.get("pid") or 0),
        str(tail_bytes),
        str(int(job.get("log_keep") or 0)),
    ]
