"""The per-command path on SSH hosts: commands, background jobs and listings over plain exec
channels, for a host whose login user has no usable python3 (the sandbox agent cannot run).

Every call is one exec channel on the host's pooled connection, running a POSIX sh script as
the sandbox (layout.as_sandbox: its user, its limits, `env -i`), the same scripts the Docker
backend runs inside its containers:

- exec: execscripts.WRAPPER (coreutils `timeout` inside, then the sweep of what still holds
  the output, and after a timeout of the command's session and marked processes; exit 125
  and a notice line for its own failures). Output is read as it comes into HeadTailBuffers
  (true counts) and handed to on_output. The caller keeps its own deadline (timeout +
  KILL_AFTER + the sweep's limit + grace): past it the channel is closed and a second
  command kills every process carrying the exec's marker (execscripts.KILL_MARKED). stdin
  goes over the channel itself (its end is the command's end of file), so unlike Docker's
  environment variable it has no size limit;
- background jobs: jobscripts.START (setsid nohup RUNNER, pid/log/exit files under
  <sandbox>/.sandhub/jobs/<job id>/), POLL + parse_status, CANCEL (term, then the fork-free
  kill mode): the files and scripts the agent path (jobs.py) uses, so a job started by
  either path is polled and cancelled by either;
- list_dir: archives.LIST (one `find -printf`), paths mapped back to /workspace.

A command costs a shell more than through the agent (sudo, env, sh on every call), which is
why the agent stays the first choice (backend.py).
"""

from __future__ import annotations

import contextlib
import logging
import select
import shlex
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import paramiko

from hosts.backends import archives
from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    HeadTailBuffer,
    JobStatus,
    OutputCallback,
    SandboxGone,
)
from hosts.backends.execscripts import (
    KILL_MARKED,
    NOTICE_SWEEP,
    SWEEP_LIMIT,
    WRAPPER,
    WRAPPER_FAILED,
    Notice,
)
from hosts.backends.jobscripts import (
    CANCEL,
    KILL_AFTER,
    POLL,
    RUNNER,
    START,
    check_job,
    log_keep_bytes,
    parse_status,
)
from hosts.backends.ssh import layout
from hosts.backends.ssh.agent import lost
from hosts.backends.ssh.connection import RunResult, SshConnection
from hosts.backends.ssh.errors import SshError

__all__ = ["MARKER_ENV", "PlainCommands"]

logger = logging.getLogger(__name__)

MARKER_ENV = "SANDHUB_EXEC_ID"  # what the wrapper's and KILL_MARKED's sweeps look for
_KILL_AFTER = 2.0  # SIGTERM at the timeout, SIGKILL this long after (inside, by `timeout`)
# On top of timeout + _KILL_AFTER before the caller gives up: the wrapper's sweep after a
# timeout may take up to SWEEP_LIMIT and must be able to report on its own; the rest is the
# round trip of a loaded host.
_CLIENT_GRACE = SWEEP_LIMIT + 3.0
INTERNAL_TIMEOUT = 30.0  # the platform's own scripts: job start, poll, cancel, listing
_CHUNK = 64 * 1024
_START_CAP = 16 * 1024
_LISTING_CAP = 16 * 1024 * 1024
_CANNOT_RUN = 126  # the wrapper's answer for a cwd it cannot enter
_CANCEL_ATTEMPTS = 10


class PlainCommands:
    """Commands, jobs and listings of one host's sandboxes without the agent.

    `connect` returns the host's live connection (asked on every call, so a reconnect is
    picked up), as for the agent link (agent.py).
    """

    def __init__(self, connect: Callable[[], SshConnection]) -> None:
        self.connect = connect

    # --- commands ------------------------------------------------------------------------------
    def exec(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """SandboxBackend.exec over a plain channel. argv's /workspace arguments are the
        caller's to map (backend._mapped); cwd is a sandbox path. On timeout, exit_code is
        124 (SIGTERM) or 137 (SIGKILL) from `timeout`, or None when the caller's own deadline
        had to cut the channel."""
        if not argv:
            raise BackendError("empty command")
        if timeout <= 0:
            raise BackendError("timeout must be positive")
        marker = uuid.uuid4().hex
        wrapped = ["sh", "-c", WRAPPER, "sandhub-exec", layout.host_path(state, cwd)]
        wrapped += [f"{timeout:.3f}", f"{_KILL_AFTER:g}", *argv]
        line = _as_sandbox(state, wrapped, env={**env, MARKER_ENV: marker})
        connection = self.connect()
        out, err = HeadTailBuffer(output_cap), HeadTailBuffer(output_cap)
        notice = Notice(marker)
        started = time.monotonic()
        deadline = started + timeout + _KILL_AFTER + _CLIENT_GRACE
        channel = _start(connection, line)
        try:
            _feed(channel, stdin or b"")
            finished = _pump(channel, deadline, out, err, notice, on_output)
            exit_code = _exit_status(channel, deadline) if finished else None
        except BaseException:
            # A failing callback or an interrupt must not leave the command running.
            _close(channel)
            self._kill_marked(state, marker)
            raise
        _close(channel)
        duration = time.monotonic() - started
        if not finished:
            self._kill_marked(state, marker)
        elif exit_code is None and (error := lost(connection, "a command ran")) is not None:
            raise error
        if notice.reason is not None and exit_code == WRAPPER_FAILED:
            if notice.kind == NOTICE_SWEEP:
                self._kill_marked(state, marker)
            raise BackendError(notice.reason)
        if exit_code == _CANNOT_RUN:  # no cwd, say: is the whole sandbox gone?
            self.check_gone(state)
        # `timeout` exits 124 (137 if SIGKILL was needed); a command may exit so itself, but
        # not after running for the whole timeout.
        timed_out = not finished or (exit_code in (124, 137) and duration >= timeout)
        return ExecResult(
            exit_code=exit_code,
            stdout=out.getvalue(),
            stderr=err.getvalue(),
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=timed_out,
            duration_seconds=duration,
        )

    def _kill_marked(self, state: dict[str, Any], marker: str) -> None:
        """Best effort, from a second command: the caller already has its answer."""
        try:
            self.script(state, KILL_MARKED, "sandhub-kill", marker)
        except Exception:
            logger.warning("could not kill the processes of command %s", marker, exc_info=True)

    def script(
        self, state: dict[str, Any], script: str, *args: str, cap: int = 64 * 1024
    ) -> RunResult:
        """`sh -c script args...` as the sandbox, from / (a command of the platform's own)."""
        line = _as_sandbox(state, ["sh", "-c", script, *args], cwd="/")
        return self.connect().run(line, timeout=INTERNAL_TIMEOUT, max_output=cap)

    def check_gone(self, state: dict[str, Any]) -> None:
        """SandboxGone if the sandbox's workspace no longer exists on the host."""
        workspace = str(state["workspace"])
        try:
            result = self.connect().run(f"test -d {shlex.quote(workspace)}", timeout=10)
        except SshError:
            return  # the caller's own error stands
        if result.exit_code == 1:
            raise SandboxGone(
                f"the directory of sandbox {state['sandbox_id']} ({workspace}) no longer "
                "exists on its host"
            )

    # --- background jobs -----------------------------------------------------------------------
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
        """Start argv detached (setsid nohup, as on Docker's per-command path); the job dict
        (the agent path's keys: either path polls and cancels it)."""
        check_job(argv, job_id, timeout)
        directory = layout.job_dir(state, job_id)
        limit = "0" if timeout is None else f"{timeout:.3f}"
        keep = log_keep_bytes()
        where = layout.host_path(state, cwd)
        launcher = ["sh", "-c", START, "sandhub-start", job_id, directory, where, limit]
        # The job inherits the launcher's environment: the sandbox's and the call's.
        line = _as_sandbox(state, [*launcher, str(keep), RUNNER, *argv], env=env, cwd="/")
        result = self.connect().run(line, timeout=INTERNAL_TIMEOUT, max_output=_START_CAP)
        message = result.stderr.decode("utf-8", "replace").strip()
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
            "log_keep": keep,
        }

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        """Running or not, exit code, and the last tail_bytes of the job's log."""
        tail_bytes = max(int(tail_bytes), 0)
        result = self.script(
            state,
            POLL,
            "sandhub-poll",
            str(job["dir"]),
            str(job["job_id"]),
            str(job.get("pid") or 0),
            str(tail_bytes),
            str(int(job.get("log_keep") or 0)),
            cap=tail_bytes + 1024,
        )
        message = result.stderr.decode("utf-8", "replace").strip()
        if result.exit_code != 0:
            raise BackendError(f"could not read job {job['job_id']}: {message or result.exit_code}")
        return parse_status(message, result.stdout)

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        """SIGTERM to the job's session and marked processes, SIGKILL KILL_AFTER s later;
        idempotent. A run that died on a failed fork (a fork bomb holds the pids limit) is
        tried again in CANCEL's fork-free kill mode, as on Docker."""
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
        timeout = INTERNAL_TIMEOUT + KILL_AFTER
        line = _as_sandbox(state, ["sh", "-c", CANCEL, "sandhub-cancel", *args, mode], cwd="/")
        result = self.connect().run(line, timeout=timeout, max_output=4096)
        return result.exit_code, result.stderr.decode("utf-8", "replace").strip()

    # --- files ---------------------------------------------------------------------------------
    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        """Entries of a directory (or the one entry of a file), paths in the sandbox's terms."""
        host = layout.host_path(state, path)
        result = self.script(state, archives.LIST, "sandhub-ls", host, cap=_LISTING_CAP)
        if result.exit_code == archives.MISSING_EXIT:
            self.check_gone(state)
            raise FileNotFoundError(path)
        if result.stdout_truncated:
            raise BackendError(f"the listing of {path} is over {_LISTING_CAP} bytes")
        if result.exit_code != 0 and not result.stdout:
            message = result.stderr.decode("utf-8", "replace").strip()
            if "Permission denied" in message:
                raise PermissionError(message)
            raise BackendError(f"cannot list {path}: {message or result.exit_code}")
        # Unreadable subdirectories make find exit 1 but still list the rest: keep what came.
        entries = archives.parse_listing(result.stdout)
        return [replace(e, path=layout.sandbox_path(state, e.path)) for e in entries]


# --- channels ------------------------------------------------------------------------------------


def _as_sandbox(
    state: dict[str, Any],
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> str:
    try:
        return layout.as_sandbox(state, argv, env=env, cwd=cwd)
    except layout.LayoutError as exc:
        raise BackendError(str(exc)) from exc


def _start(connection: SshConnection, line: str) -> paramiko.Channel:
    channel = connection.open_channel()
    try:
        channel.exec_command(line)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        _close(channel)
        raise lost(connection, "starting a command") or SshError(
            f"starting a command on {connection.target.where} failed: {exc}"
        ) from exc
    return channel


def _feed(channel: paramiko.Channel, data: bytes) -> None:
    """stdin, then its end; from a thread, so a command that prints before it reads (and
    fills the window back to us) cannot deadlock against the send."""

    def feed() -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            if data:
                channel.sendall(data)
            channel.shutdown_write()

    if len(data) <= _CHUNK:  # fits in the window: sent at once
        feed()
        return
    threading.Thread(target=feed, name="sandhub-ssh-plain-stdin", daemon=True).start()


def _pump(
    channel: paramiko.Channel,
    deadline: float,
    out: HeadTailBuffer,
    err: HeadTailBuffer,
    notice: Notice,
    on_output: OutputCallback | None,
) -> bool:
    """Read stdout and stderr until the end (True) or the deadline (False)."""
    # channel.fileno() is readable while either stream has data, and for good once the
    # channel is closed. poll, not select: select fails on descriptors above 1024.
    poller = select.poll()
    poller.register(channel.fileno(), select.POLLIN)
    while True:
        # Checked before draining: data comes before EOF on the transport.
        finished = channel.eof_received or channel.closed
        while channel.recv_ready():
            _take(channel.recv(_CHUNK), "stdout", out, on_output)
        while channel.recv_stderr_ready():
            chunk = channel.recv_stderr(_CHUNK)
            notice.feed(chunk)
            _take(chunk, "stderr", err, on_output)
        if finished:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        poller.poll(max(int(remaining * 1000), 1))


def _take(
    chunk: bytes, stream: str, buffer: HeadTailBuffer, on_output: OutputCallback | None
) -> None:
    if chunk:
        buffer.write(chunk)
        if on_output is not None:
            on_output(stream, chunk)


def _exit_status(channel: paramiko.Channel, deadline: float) -> int | None:
    """The exit status sshd sends around the end of output; None if none came."""
    channel.status_event.wait(max(deadline - time.monotonic(), 1.0))
    if not channel.exit_status_ready():
        return None
    status = channel.exit_status
    return None if status < 0 else status


def _close(channel: paramiko.Channel) -> None:
    with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
        channel.close()
