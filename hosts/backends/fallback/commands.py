"""Commands, the platform's own scripts and listings over the per-command path.

A command runs through a small POSIX sh wrapper (execscripts.WRAPPER) that enforces the
timeout inside the sandbox with coreutils `timeout` and then sweeps up what the command left:
processes still holding its output, and after a timeout its session and every process
carrying the exec's marker. When the wrapper cannot start the command or stop what it left,
it says so (a notice on stderr and WRAPPER_FAILED), and that is a BackendError here, never a
result. The caller keeps its own deadline too (timeout + KILL_AFTER + the sweep's limit +
grace): past it, a second exec kills every process carrying the marker. Output is kept head
and tail up to the caller's cap, however much comes, with the true counts.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from typing_extensions import Unpack

from hosts.backends import archives, syncscripts
from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    HeadTailBuffer,
    SandboxGone,
    Unsupported,
)
from hosts.backends.execscripts import (
    KILL_MARKED,
    NOTICE_SWEEP,
    SWEEP_LIMIT,
    WRAPPER,
    WRAPPER_FAILED,
    Notice,
    status_before_the_sweep,
)
from hosts.backends.fallback.primitive import CouldNotStart, Deadline, PlainExec
from hosts.backends.options import CommandOptions
from hosts.backends.place import SandboxPlace
from hosts.backends.stdin import StdinPipe

__all__ = ["INTERNAL_TIMEOUT", "MARKER_ENV", "PlainCommands", "ScriptResult"]

logger = logging.getLogger(__name__)

MARKER_ENV = "SANDHUB_EXEC_ID"  # what the wrapper's and KILL_MARKED's sweeps look for
KILL_AFTER = 2.0  # SIGTERM at the timeout, SIGKILL this long after (inside, by `timeout`)
# On top of timeout + KILL_AFTER before the caller gives up: the wrapper's sweep after a
# timeout may take up to SWEEP_LIMIT and must be able to report on its own; the rest is the
# round trip of a loaded host.
CLIENT_GRACE = SWEEP_LIMIT + 3.0
INTERNAL_TIMEOUT = 30.0  # the platform's own scripts: job start, poll, cancel, listing
_LISTING_CAP = 16 * 1024 * 1024
_CANNOT_RUN = 126  # the wrapper's answer for a cwd it cannot enter


@dataclass(frozen=True)
class ScriptResult:
    """What one of the platform's own scripts did."""

    exit_code: int | None
    stdout: bytes
    stderr: str
    stdout_truncated: bool


class PlainCommands:
    """Commands, scripts and listings of one host's sandboxes without the agent."""

    def __init__(self, primitive: PlainExec, place: SandboxPlace) -> None:
        self.primitive = primitive
        self.place = place

    def exec(
        self, state: dict[str, Any], argv: list[str], **options: Unpack[CommandOptions]
    ) -> ExecResult:
        """SandboxBackend.exec, one process start. On timeout, exit_code is 124 (SIGTERM) or
        137 (SIGKILL) from `timeout`, or None when the caller's own deadline had to cut it."""
        timeout, output_cap, stdin = options["timeout"], options["output_cap"], options.get("stdin")
        on_output = options.get("on_output")
        if not argv:
            raise BackendError("empty command")
        if timeout <= 0:
            raise BackendError("timeout must be positive")
        if isinstance(stdin, StdinPipe):
            raise Unsupported("input written while the command runs needs the sandbox agent")
        limit = self.primitive.max_stdin
        if stdin is not None and limit is not None and len(stdin) > limit:
            raise Unsupported(
                f"stdin of {len(stdin)} bytes is over this host's {limit}-byte limit for "
                "commands without the sandbox agent; upload a file and redirect from it instead"
            )
        marker = options.get("marker") or uuid.uuid4().hex
        wrapped = ["sh", "-c", WRAPPER, "sandhub-exec", self.place.host_path(state, options["cwd"])]
        wrapped += [f"{timeout:.3f}", f"{KILL_AFTER:g}", *argv]
        out, err = HeadTailBuffer(output_cap), HeadTailBuffer(output_cap)
        notice = Notice(marker)

        def output(stream: str, chunk: bytes) -> None:
            (out if stream == "stdout" else err).write(chunk)
            if stream != "stdout":
                notice.feed(chunk)
            if on_output is not None:
                on_output(stream, chunk)

        started = time.monotonic()
        deadline = started + timeout + KILL_AFTER + CLIENT_GRACE
        environment = {**options["env"], MARKER_ENV: marker}
        finished = True
        try:
            exit_code = self.primitive.run(
                state, wrapped, env=environment, stdin=stdin, deadline=deadline, output=output
            )
        except Deadline:
            finished, exit_code = False, None
        except CouldNotStart as exc:
            raise BackendError(f"the command could not start: {exc}") from exc
        except SandboxGone:
            raise
        except BaseException:
            # A failing callback or an interrupt must not leave the command running.
            self.kill_marked(state, marker)
            raise
        duration = time.monotonic() - started
        if not finished:
            self.kill_marked(state, marker)
        if notice.reason is not None and exit_code == WRAPPER_FAILED:
            exit_code = self._after_a_failed_sweep(state, marker, notice)
        if exit_code == _CANNOT_RUN:  # no cwd, say: is the whole sandbox gone?
            self.place.after_missing(state)
        # `timeout` exits 124 (137 if SIGKILL was needed); a command may exit so itself (137
        # when the OOM killer hits it), but not after running for the whole timeout.
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

    def _after_a_failed_sweep(self, state: dict[str, Any], marker: str, notice: Notice) -> int:
        """The command's exit status where the wrapper's sweep ran out of time but a second
        one, from a new exec, ended what the command left behind; else BackendError.

        The first sweep stops (SIGSTOP) what it finds before it gives up, and a stopped
        process forks no more: in a sandbox with little CPU on a loaded host, a fork bomb
        outran the first sweep's 10 s and not the second's."""
        status = status_before_the_sweep(notice.reason or "")
        if notice.kind != NOTICE_SWEEP or status is None:
            raise BackendError(notice.reason)
        if not self.kill_marked(state, marker):
            raise BackendError(notice.reason)
        return status

    def kill_marked(self, state: dict[str, Any], marker: str) -> bool:
        """Best effort, from a second exec: whether every process carrying the marker is
        gone (the caller already has its answer, or says why it has none)."""
        try:
            return self.script(state, KILL_MARKED, "sandhub-kill", marker).exit_code == 0
        except Exception:
            logger.warning("could not kill the processes of command %s", marker, exc_info=True)
            return False

    def script(
        self,
        state: dict[str, Any],
        script: str,
        *args: str,
        cap: int = 64 * 1024,
        env: dict[str, str] | None = None,
        timeout: float = INTERNAL_TIMEOUT,
    ) -> ScriptResult:
        """`sh -c script args...` as the sandbox, from /, as the exec's only process (no
        wrapper forks: it must get in while a fork bomb holds the pids limit)."""
        out, err = HeadTailBuffer(cap), HeadTailBuffer(16 * 1024)

        def sink(stream: str, chunk: bytes) -> None:
            (out if stream == "stdout" else err).write(chunk)

        try:
            code = self.primitive.run(
                state,
                ["sh", "-c", script, *args],
                env=env or {},
                stdin=None,
                deadline=time.monotonic() + timeout,
                output=sink,
                cwd="/",
            )
        except Deadline as exc:
            raise BackendError(f"the sandbox did not answer within {timeout:g} s") from exc
        message = err.getvalue().decode("utf-8", "replace").strip()
        return ScriptResult(code, out.getvalue(), message, out.truncated)

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        """Entries of a directory (or the one entry of a file), paths in the sandbox's terms."""
        host = self.place.host_path(state, path)
        result = self.script(state, archives.LIST, "sandhub-ls", host, cap=_LISTING_CAP)
        if result.exit_code == archives.MISSING_EXIT:
            self.place.after_missing(state)
            raise FileNotFoundError(path)
        if result.stdout_truncated:
            raise BackendError(f"the listing of {path} is over {_LISTING_CAP} bytes")
        if result.exit_code != 0 and not result.stdout:
            if "Permission denied" in result.stderr:
                raise PermissionError(result.stderr)
            raise BackendError(f"cannot list {path}: {result.stderr or result.exit_code}")
        # Unreadable subdirectories make find exit 1 but still list the rest: keep what came.
        entries = archives.parse_listing(result.stdout)
        return [replace(e, path=self.place.sandbox_path(state, e.path)) for e in entries]

    def sync_runner(self, state: dict[str, Any]) -> syncscripts.Run:
        """The sync scripts' way to run a command in the sandbox (syncscripts.runner)."""
        return syncscripts.runner(functools.partial(self.exec, state), "/workspace")
