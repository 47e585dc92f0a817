"""Background jobs in Docker sandboxes: started, polled and cancelled through `Commands`.

A job runs detached inside the container, so it outlives the request that started it, the web
process and the worker that supervises it:

- a launcher exec starts `setsid nohup sh -c RUNNER ...` with stdin from /dev/null and stdout
  and stderr to the job's log, and returns once the runner has written its pid;
- the runner is the leader of a new session (its pid is the session id and the process group
  id), ignores SIGHUP (nohup), runs the command under coreutils `timeout` when a maximum
  runtime is given, and writes the exit code (and the end time) to a file when it ends; before
  that it kills what the command left running with the log as its output, as the foreground
  exec does with its pipes, and after a timeout everything else of the job too;
- every process of the job carries SANDHUB_JOB_ID=<job id> in its environment, and the
  launcher drops the exec marker (SANDHUB_EXEC_ID) so the foreground exec's own kill sweeps
  never touch the job.

Files live in /workspace/.sandhub/jobs/<job id>/: `log` (stdout and stderr interleaved), `pid`
(pid = pgid = sid, and the start time), `exit` (exit code and end time, renamed into place so
it is never read half-written) and `cancelled`. /workspace is the sandbox's named volume: it
is the only writable place that survives a container restart (/tmp and the home directory are
tmpfs, the root filesystem is read-only), and the files API can read it, so users can download
a job's whole log; the services keep only its tail. The log is not capped: it counts against
the workspace like any file the user writes.

Cancel kills the job's whole session, not only its process group: `timeout` puts the command
in a process group of its own, and shells with job control make more. Processes that left the
session (setsid) are found by the job marker. A fork bomb keeps the pids limit used up, and
dash exits on a failed fork, so the cancel runs as the exec's only process (no wrapper), walks
the session with shell builtins only, and if a fork still failed it is run again in a
SIGKILL-only mode that never forks until the session is empty. Something that both left the
session and cleared its environment escapes it (as it escapes the foreground exec's sweeps).

Measured on the development machine: start ~70 ms, poll ~55 ms, cancel of a job that exits on
SIGTERM ~85 ms (one that ignores it gets SIGKILL 2 s later).
"""

from __future__ import annotations

import re
import time
from typing import Any

from hosts.backends.base import BackendError, HeadTailBuffer, JobStatus, SandboxGone
from hosts.backends.docker.exec import INTERNAL_TIMEOUT, Commands
from hosts.backends.docker.names import container_ref

JOBS_DIR = "/workspace/.sandhub/jobs"  # processes of a job carry SANDHUB_JOB_ID=<job id>
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
KILL_AFTER = 2  # seconds between SIGTERM and SIGKILL, for timeouts and cancels alike
_START_CAP = 16 * 1024
_BARE_ATTEMPTS = 10

# Signal $sig (empty: only look) to the job's processes, except this shell ($me) and zombies
# (dead already; their parent, tini at worst, reaps them); `found` is set if there were any.
# sweep_session takes the job's session ($sid) and uses shell builtins only: dash exits on a
# failed fork, and a fork bomb in the job keeps the pids limit used up. sweep_marked takes
# processes carrying the marker (those that left the session) and forks a grep: it runs once
# the session is empty, when forks succeed again.
_SWEEP = r"""
sweep_session() {
    found=
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        [ "$p" = "$me" ] && continue
        { read -r line < "$d/stat"; } 2>/dev/null || continue
        # Fields after the command name, which may itself hold ") ": state ppid pgrp session.
        set -f; set -- ${line##*) }; set +f
        [ "$1" != Z ] && [ "$4" = "$sid" ] || continue
        found=1; [ -z "$sig" ] || kill "-$sig" "$p" 2>/dev/null
    done
}
sweep_marked() {
    found=
    for f in $(grep -lzxF "SANDHUB_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null); do
        p=${f#/proc/}; p=${p%/environ}
        [ "$p" = "$me" ] && continue
        # Gone by now (grep itself, the subshell around it) or a zombie: nothing to kill.
        { read -r line < "/proc/$p/stat"; } 2>/dev/null || continue
        set -f; set -- ${line##*) }; set +f
        [ "$1" != Z ] || continue
        found=1; [ -z "$sig" ] || kill "-$sig" "$p" 2>/dev/null
    done
}
kill_rounds() {  # SIGKILL in rounds until one finds nobody (a fork bomb keeps making more)
    sig=KILL; round=0
    while [ $round -lt 500 ]; do
        round=$((round + 1)); sweep_session
        [ -n "$found" ] || break
    done
    [ -z "$found" ] || return 1
    round=0
    while [ $round -lt 50 ]; do
        round=$((round + 1)); sweep_marked
        [ -n "$found" ] || return 0
    done
    return 1
}
"""

# The job itself: sh -c _RUNNER sandhub-job DIR CWD LIMIT ARGV..., as session leader.
_RUNNER = (
    _SWEEP
    + r"""
dir=$1 cwd=$2 limit=$3; shift 3
me=$$ sid=$$ job=$SANDHUB_JOB_ID
printf '%s %s\n' "$$" "$(date +%s.%N)" > "$dir/pid.tmp" && mv -f "$dir/pid.tmp" "$dir/pid"
# A SIGTERM from cancel must not end this shell before the command: with a trap set, sh runs
# it only once the foreground command has ended, so the exit code is still written.
trap : TERM
if cd "$cwd"; then
    if [ "$limit" = 0 ]; then "$@"; else timeout -k "$KILL_AFTER" "$limit" "$@"; fi
    rc=$?
else
    rc=126
fi
case $rc in 124|137) kill_rounds ;; esac  # what escaped timeout's process group
# As for a foreground command: what the command left running with the log as its output
# dies with it (a finished job's log would keep growing, a fork bomb would live on); what
# redirected its output elsewhere (a server started with nohup ... >file &) stays.
round=0
while [ $round -lt 500 ]; do
    round=$((round + 1)); found=
    for d in /proc/[0-9]*; do
        [ "$d" = "/proc/$me" ] && continue
        if [ "$d/fd/1" -ef "$dir/log" ] || [ "$d/fd/2" -ef "$dir/log" ]; then
            kill -KILL "${d#/proc/}" 2>/dev/null; found=1
        fi
    done
    [ -n "$found" ] || break
done
printf '%s %s\n' "$rc" "$(date +%s.%N)" > "$dir/exit.tmp" && mv -f "$dir/exit.tmp" "$dir/exit"
""".replace("$KILL_AFTER", str(KILL_AFTER))
)

# sh -c _START sandhub-start JOB DIR CWD LIMIT RUNNER ARGV...; prints the runner's pid. It waits
# for the runner's pid file without forking (the job may be a fork bomb that has used up the
# pids limit by then); $! is the runner's pid too (a child of a shell without job control is no
# group leader, so setsid need not fork), for when the file is slow to come.
_START = r"""
job=$1 dir=$2 cwd=$3 limit=$4 runner=$5; shift 5
mkdir -p "${dir%/*}" && mkdir "$dir" || { echo "cannot create $dir" >&2; exit 1; }
unset SANDHUB_EXEC_ID
SANDHUB_JOB_ID=$job; export SANDHUB_JOB_ID
setsid nohup sh -c "$runner" sandhub-job "$dir" "$cwd" "$limit" "$@" \
    </dev/null >"$dir/log" 2>&1 &
pid=$! i=0
while [ ! -s "$dir/pid" ] && [ $i -lt 50000 ]; do i=$((i + 1)); done
[ -s "$dir/pid" ] && read -r pid _ < "$dir/pid"
echo "$pid"
"""

# sh -c _POLL sandhub-poll DIR JOB PID TAIL_BYTES: a status line on stderr, the tail on stdout.
# Alive is read before the exit file: the runner writes that file before it exits, so "not
# alive and no exit file" really means it vanished.
_POLL = r"""
dir=$1 job=$2 pid=$3 n=$4
alive=0 code= end= start= cancelled=0 size=0
grep -qzxF "SANDHUB_JOB_ID=$job" "/proc/$pid/environ" 2>/dev/null && alive=1
# Before the runner has written its pid file it may not have exec'd yet (its environ is still
# the launcher's): the process being there is enough then.
[ -e "$dir/pid" ] || [ ! -d "/proc/$pid" ] || alive=1
[ -f "$dir/exit" ] && read -r code end < "$dir/exit"
[ -f "$dir/pid" ] && read -r _ start < "$dir/pid"
[ -e "$dir/cancelled" ] && cancelled=1
[ -f "$dir/log" ] && size=$(stat -c %s "$dir/log")
printf 'sandhub-job %s %s %s %s %s %s\n' \
    "$alive" "${code:--}" "$size" "${start:--}" "${end:--}" "$cancelled" >&2
if [ "$n" -gt 0 ] && [ -f "$dir/log" ]; then exec tail -c "$n" "$dir/log"; fi
exit 0
"""

# sh -c _CANCEL sandhub-cancel DIR JOB SID MODE: with MODE "term", SIGTERM and up to
# KILL_AFTER s to exit first; "kill" goes straight to the fork-free SIGKILL rounds (what the
# caller asks for when a "term" run died on a failed fork).
_CANCEL = (
    _SWEEP
    + r"""
dir=$1 job=$2 sid=$3 mode=$4 me=$$
[ -d "$dir" ] && [ ! -e "$dir/exit" ] && : > "$dir/cancelled"
if [ "$mode" = term ]; then
    sig=TERM; sweep_session; sweep_marked
    sig= i=0
    while [ $i -lt $((KILL_AFTER * 50)) ]; do
        i=$((i + 1)); sleep 0.02
        sweep_session; left=$found; sweep_marked
        [ -n "$left$found" ] || break
    done
fi
kill_rounds || { echo "processes of job $job survive SIGKILL" >&2; exit 1; }
""".replace("KILL_AFTER", str(KILL_AFTER))
)


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
        if not argv:
            raise BackendError("empty command")
        if not JOB_ID_RE.match(job_id):
            raise BackendError(f"malformed job id {job_id!r}")
        if timeout is not None and timeout <= 0:
            raise BackendError("timeout must be positive")
        directory = f"{JOBS_DIR}/{job_id}"
        limit = "0" if timeout is None else f"{timeout:.3f}"
        # Through exec, not _internal: the job inherits this exec's environment (the
        # sandbox's env and the caller's), and that is how it gets them.
        result = self.commands.exec(
            state,
            ["sh", "-c", _START, "sandhub-start", job_id, directory, cwd, limit, _RUNNER, *argv],
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
        return {
            "job_id": job_id,
            "dir": directory,
            "log": f"{directory}/log",
            "pid": pid,  # = process group id = session id
            "timeout": timeout,
        }

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        tail_bytes = max(int(tail_bytes), 0)
        code, output, message = self.commands.internal(
            state,
            _POLL,
            job["dir"],
            job["job_id"],
            str(job.get("pid") or 0),
            str(tail_bytes),
            cap=tail_bytes + 1024,
        )
        if code != 0:
            raise BackendError(f"could not read job {job['job_id']}: {message or code}")
        return _parse_status(message, output)

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        args = [job["dir"], job["job_id"], str(job.get("pid") or "")]
        code, message = self._bare(state, [_CANCEL, "sandhub-cancel", *args, "term"])
        # A fork bomb: sh died on a failed fork. Again, with the fork-free SIGKILL rounds only.
        for _ in range(_BARE_ATTEMPTS):
            if code == 0 or "fork" not in message.lower():
                break
            code, message = self._bare(state, [_CANCEL, "sandhub-cancel", *args, "kill"])
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
                    HeadTailBuffer(4096),
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


def _parse_status(stderr: str, output: bytes) -> JobStatus:
    for line in reversed(stderr.splitlines()):
        fields = line.split()
        if len(fields) == 7 and fields[0] == "sandhub-job":
            break
    else:
        raise BackendError(f"unreadable job status: {stderr[-300:]!r}")
    _, alive, code, size, start, end, cancelled = fields
    started, ended = _seconds(start), _seconds(end)
    exit_code = int(code) if code.lstrip("-").isdigit() else None
    return JobStatus(
        running=alive == "1" and exit_code is None,
        exit_code=exit_code,
        output=output,
        output_bytes=int(size),
        cancelled=cancelled == "1",
        elapsed_seconds=ended - started if started is not None and ended is not None else None,
    )


def _seconds(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
