"""Background jobs in Docker sandboxes: started, polled and cancelled through `Commands`.

A job runs detached inside the container, so it outlives the request that started it, the web
process and the worker that supervises it:

- a launcher exec starts `setsid nohup sh -c RUNNER ...` with stdin from /dev/null and stdout
  and stderr to the job's log, and returns once the runner has written its pid;
- the runner is the leader of a new session (its pid is the session id and the process group
  id), ignores SIGHUP (nohup), runs the command under coreutils `timeout` when a maximum
  runtime is given, and writes the exit code (and the end time) to a file when it ends; before
  that it kills what the command left running with the job's output as its own, as the
  foreground exec does with its pipes, and after a timeout everything else of the job too;
- the job's output goes through a fifo to `split`, the output keeper, which writes the log's
  head and its last parts (below); the runner waits for it to write the end before the exit
  code;
- every process of the job carries SANDHUB_JOB_ID=<job id> in its environment, and the
  launcher drops the exec marker (SANDHUB_EXEC_ID) so the foreground exec's own kill sweeps
  never touch the job.

Files live in /workspace/.sandhub/jobs/<job id>/: `log` (stdout and stderr interleaved, its
first KEEP bytes), `log.<n>` (the last one or two parts of KEEP bytes of a longer log: the
middle is dropped as the job runs, so a log takes at most 3 * KEEP bytes of disk; the true
size is still reported), `pid` (pid = pgid = sid, and the start time), `exit` (exit code and
end time, renamed into place so it is never read half-written) and `cancelled`. KEEP is
settings.SANDHUB_JOB_LOG_KEEP_BYTES (default 4 MiB), fixed per job when it starts.
/workspace is the sandbox's volume: the only writable place that survives a container restart
(/tmp and the home directory are tmpfs, the root filesystem is read-only), and the files API
can read it. Everything there is the sandbox's to write, these files too: what a poll reads
from them is checked, and garbage (an exit code that is no exit code) is reported as such
(JobStatus.problem), never raised.

Cancel kills the job's whole session, not only its process group: `timeout` puts the command
in a process group of its own, and shells with job control make more. Processes that left the
session (setsid) are found by the job marker. A fork bomb keeps the pids limit used up, and
dash exits on a failed fork, so the cancel runs as the exec's only process (no wrapper), walks
the session with shell builtins only, and if a fork still failed it is run again in a
SIGKILL-only mode that never forks until the session is empty. Something that both left the
session and cleared its environment escapes it (as it escapes the foreground exec's sweeps).

The scripts are in jobscripts.py. Measured on the development machine: start ~70 ms, poll
~55 ms, cancel of a job that exits on SIGTERM ~85 ms (one that ignores it gets SIGKILL 2 s
later).
"""

from __future__ import annotations

import time
from typing import Any

from hosts.backends.base import BackendError, HeadTailBuffer, JobStatus, SandboxGone
from hosts.backends.docker.exec import INTERNAL_TIMEOUT, Commands
from hosts.backends.docker.names import JOBS_DIR, container_ref
from hosts.backends.jobscripts import (
    CANCEL,
    JOB_ID_RE,
    KILL_AFTER,
    POLL,
    RUNNER,
    START,
    check_job,
    job_dict,
    log_keep_bytes,
    parse_status,
    poll_args,
    runner_args,
)

__all__ = ["JOBS_DIR", "JOB_ID_RE", "KILL_AFTER", "Jobs"]

_START_CAP = 16 * 1024
_BARE_ATTEMPTS = 10
_NOT_STARTED = 126  # the exit code of an exec whose process the engine could not start


class Jobs:
    """Background jobs in the sandboxes of one engine, run through `commands`."""

    def __init__(self, commands: Commands) -> None:
        self.commands = commands

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
        check_job(argv, job_id, timeout)
        directory = f"{JOBS_DIR}/{job_id}"
        keep = log_keep_bytes()
        launch = [job_id, *runner_args(directory, cwd, timeout, keep)]
        script = [START, "sandhub-start", *launch, RUNNER]
        # Through exec, not _internal: the job inherits this exec's environment (the
        # sandbox's env and the caller's), and that is how it gets them.
        result = self.commands.exec(
            state,
            ["sh", "-c", *script, *argv],
            cwd="/",
            env=env,
            timeout=INTERNAL_TIMEOUT,
            output_cap=_START_CAP,
        )
        message = result.stderr.decode("utf-8", "replace").strip()
        if result.timed_out:
            raise BackendError(f"starting job {job_id} took over {INTERNAL_TIMEOUT:g} s")
        if result.exit_code != 0:
            raise BackendError(f"could not start job {job_id}: {message or result.exit_code}")
        try:
            pid = int(result.stdout.decode().strip())
        except ValueError as exc:
            raise BackendError(f"job {job_id} reported no pid: {result.stdout[:200]!r}") from exc
        return job_dict(job_id, directory, pid, timeout, keep)

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        tail_bytes = max(int(tail_bytes), 0)
        code, output, message = self.commands.internal(
            state, POLL, *poll_args(job, tail_bytes), cap=tail_bytes + 1024
        )
        if code != 0:
            raise BackendError(f"could not read job {job['job_id']}: {message or code}")
        return parse_status(message, output)

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        args = [job["dir"], job["job_id"], str(job.get("pid") or "")]
        code, message = self._bare(state, [CANCEL, "sandhub-cancel", *args, "term"])
        # A fork bomb: sh died on a failed fork, the engine could not even start it (126,
        # "OCI runtime exec failed ... resource temporarily unavailable"), or it ran out of
        # time (None: a starved sandbox on a loaded host). Again, with the fork-free SIGKILL
        # rounds only.
        for attempt in range(_BARE_ATTEMPTS):
            retry = code in (None, _NOT_STARTED) or "fork" in message.lower()
            if code == 0 or not retry:
                break
            time.sleep(0.05 * attempt)
            code, message = self._bare(state, [CANCEL, "sandhub-cancel", *args, "kill"])
        if code != 0:
            raise BackendError(f"could not cancel job {job['job_id']}: {message or code}")

    def _bare(self, state: dict[str, Any], script_and_args: list[str]) -> tuple[int | None, str]:
        """Run a script as the exec's only process: (exit code, stderr).

        Not through the exec wrapper, which forks `timeout`: a job that is a fork bomb keeps
        the pids limit used up, and the kill must still get in. The engine itself may fail to
        start the one process while the limit is reached, so that is tried a few times.
        """
        container = container_ref(state)
        for attempt in range(_BARE_ATTEMPTS):
            errors = HeadTailBuffer(4096)
            try:
                exec_id, finished = self.commands.run(
                    container,
                    ["sh", "-c", *script_and_args],
                    {},
                    time.monotonic() + INTERNAL_TIMEOUT,
                    errors,  # the engine's own "exec failed" comes on stdout
                    errors,
                    None,
                    None,
                )
                code = self.commands.exit_code(exec_id, finished)
            except SandboxGone:
                raise
            except BackendError:
                if attempt == _BARE_ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
                continue
            return code, errors.getvalue().decode("utf-8", "replace").strip()
        raise BackendError("unreachable")
