"""Background jobs in SSH sandboxes, through the sandbox agent.

A job runs detached on the host, so it outlives the agent, its channel, the connection and
the platform process that started it:

- start: the agent's `job_start` runs the job runner (jobscripts.RUNNER, the Docker
  backend's) in a session of its own, stdin /dev/null, output to the job's log, the job
  marker (SANDHUB_JOB_ID) in its environment and no exec marker, so neither the agent's
  sweeps nor the agent's end touch it;
- files: `<sandbox>/.sandhub/jobs/<job id>/` (layout.job_dir): log (and log.<n> parts of a
  long log), pid, exit, cancelled, as on Docker;
- poll: jobscripts.POLL as the sandbox user through the agent (a status line on stderr, the
  log's tail on stdout), parsed as on Docker: whatever the sandbox wrote into the job's files,
  a poll answers a JobStatus (with `problem` set), never an exception;
- cancel: the agent's `job_cancel` (SIGTERM to the job's session and its marked processes,
  SIGKILL after KILL_AFTER s, then the sweep) from the already running agent: no process has
  to start, so it works while the job is a fork bomb holding the sandbox's pids limit.

The job dict is all a later call needs, in any process: with the sandbox's state, a new agent
link polls and cancels a job another process started.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from hosts.backends.base import BackendError, JobStatus
from hosts.backends.jobscripts import JOB_ID_RE, KILL_AFTER, POLL, RUNNER, check_job, parse_status
from hosts.backends.ssh import layout
from hosts.backends.ssh.agent_link import SshAgentLink

__all__ = ["JOB_ID_RE", "KILL_AFTER", "SshJobs", "parse_status"]

DEFAULT_LOG_KEEP_BYTES = 4 * 1024 * 1024
_LOG_KEEP_RANGE = (64 * 1024, 256 * 1024 * 1024)  # a part per fork: not too small
# A cancel: SIGTERM, KILL_AFTER s of grace, then the sweep (up to its own 10 s limit).
CANCEL_TIMEOUT = 30.0


def log_keep_bytes() -> int:
    low, high = _LOG_KEEP_RANGE
    value = getattr(settings, "SANDHUB_JOB_LOG_KEEP_BYTES", DEFAULT_LOG_KEEP_BYTES)
    return min(max(int(value), low), high)


class SshJobs:
    """Background jobs of one host's sandboxes, run through `link`'s agents."""

    def __init__(self, link: SshAgentLink) -> None:
        self.link = link

    def start_background(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        job_id: str,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Start argv detached (SandboxBackend.start_background); the job dict."""
        check_job(argv, job_id, timeout)
        directory = layout.job_dir(state, job_id)
        limit = "0" if timeout is None else f"{timeout:.3f}"
        keep = log_keep_bytes()
        where = layout.host_path(state, cwd)
        runner = ["nohup", "sh", "-c", RUNNER, "sandhub-job", directory, where, limit, str(keep)]
        try:
            environment = layout.sandbox_env(state, env)
        except layout.LayoutError as exc:
            raise BackendError(str(exc)) from exc
        try:
            pid = self.link.call(
                state, lambda c: c.start_job(job_id, directory, [*runner, *argv], environment)
            )
        except OSError as exc:  # the job's directory could not be made (it exists, say)
            raise BackendError(f"could not start job {job_id}: {exc}") from exc
        return {
            "job_id": job_id,
            "dir": directory,
            "log": f"{directory}/log",
            "pid": pid,  # = process group id = session id
            "timeout": timeout,
            "log_keep": keep,  # 0 (or missing): one uncapped log
        }

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        """Running or not, exit code, and the last tail_bytes of the job's log."""
        tail_bytes = max(int(tail_bytes), 0)
        result = self.link.run_script(
            state,
            POLL,
            str(job["dir"]),
            str(job["job_id"]),
            str(job.get("pid") or 0),
            str(tail_bytes),
            str(int(job.get("log_keep") or 0)),
            output_cap=tail_bytes + 1024,
        )
        message = result.stderr.decode("utf-8", "replace").strip()
        if result.exit_code != 0:
            code = "timed out" if result.timed_out else result.exit_code
            raise BackendError(f"could not read job {job['job_id']}: {message or code}")
        return parse_status(message, result.stdout)

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        """Kill every process of the job (SIGTERM, then SIGKILL); idempotent. The job is
        marked cancelled if it had not ended."""
        pid = job.get("pid")
        done = self.link.idempotent(
            state,
            lambda client: client.cancel_job(
                str(job["job_id"]),
                str(job["dir"]),
                int(pid) if pid else None,
                KILL_AFTER,
                CANCEL_TIMEOUT,
            ),
        )
        if not done:
            raise BackendError(f"processes of job {job['job_id']} survive SIGKILL")
