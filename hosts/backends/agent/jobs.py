"""Background jobs through the sandbox agent, for every kind of host.

A job runs detached, so it outlives the agent, its stream, the connection and the platform
process that started it:

- start: the agent's `job_start` runs the job runner (jobscripts.RUNNER) in a session of its
  own, stdin /dev/null, output to the job's log, the job marker (SANDHUB_JOB_ID) in its
  environment and no exec marker, so neither the agent's sweeps nor the agent's end touch it;
- files: the kind's job directory, out of /workspace (Docker: `/run/sandhub/jobs/<job id>/`, a
  tmpfs; SSH: `<sandbox dir>/.sandhub/jobs/<job id>/`; docs/lifecycle.md): log (and log.<n>
  parts of a long log), pid, exit, cancelled;
- poll: jobscripts.POLL as the sandbox user through the agent (a status line on stderr, the
  log's tail on stdout): whatever the sandbox wrote into the job's files, a poll answers a
  JobStatus (with `problem` set), never an exception;
- cancel: the agent's `job_cancel` (SIGTERM to the job's session and its marked processes,
  SIGKILL after KILL_AFTER s, then the sweep) from the already running agent: no process has
  to start, so it works while the job is a fork bomb holding the sandbox's pids limit.

The job dict (joblaunch.job_dict) is all a later call needs, in any process, and the
per-command path (fallback) uses the same files and scripts: either path polls and cancels a
job the other started.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import Unpack

from hosts.backends.agent.link import AgentLink
from hosts.backends.base import BackendError, JobStatus
from hosts.backends.joblaunch import CANCEL_TIMEOUT, job_launch, poll_args
from hosts.backends.jobscripts import (
    KILL_AFTER,
    POLL,
    RUNNER,
    parse_status,
)
from hosts.backends.options import JobOptions

__all__ = ["AgentJobs"]


class AgentJobs:
    """Background jobs of one host's sandboxes, run through `link`'s agents."""

    def __init__(self, link: AgentLink) -> None:
        self.link = link

    def start_background(
        self, state: dict[str, Any], argv: list[str], **options: Unpack[JobOptions]
    ) -> dict[str, Any]:
        """Start argv detached (SandboxBackend.start_background); the job dict."""
        launch = job_launch(self.link.place, state, argv, options)
        job_id, directory = launch.job_id, launch.directory
        runner = ["nohup", "sh", "-c", RUNNER, "sandhub-job", *launch.runner_args]
        environment = self.link.place.environment(state, options["env"])
        try:
            pid = self.link.call(
                state, lambda c: c.start_job(job_id, directory, [*runner, *argv], environment)
            )
        except OSError as exc:  # the job's directory could not be made (it exists, say)
            raise BackendError(f"could not start job {job_id}: {exc}") from exc
        return launch.job(pid)

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        """Running or not, exit code, and the last tail_bytes of the job's log."""
        tail_bytes = max(int(tail_bytes), 0)
        result = self.link.run_script(
            state, POLL, *poll_args(job, tail_bytes), output_cap=tail_bytes + 1024
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
