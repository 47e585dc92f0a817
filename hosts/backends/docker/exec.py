"""Commands in a Docker sandbox: one engine exec each, its output read as it comes.

Commands run through a small POSIX sh wrapper (execscripts.WRAPPER) that enforces the timeout
inside the container with coreutils `timeout` and then sweeps up processes the command left
behind: those still holding its output pipes, and after a timeout also its session and every
process carrying the exec's marker in its environment. The wrapper returns once they are
reaped; when it cannot start the command or stop what it left, it says so (a notice on
stderr and execscripts.WRAPPER_FAILED), and that is a BackendError here, never a result: the
engine closes an exec's stream shortly after the wrapper exits, so a command whose leftovers
outlived it would otherwise pass for one that ended well. The caller keeps its own deadline
too: if the stream is still open `timeout + _KILL_AFTER + _CLIENT_GRACE` seconds after the
start, it stops reading and kills every process carrying the marker from a second exec.

Output is kept head and tail up to the caller's cap (HeadTailBuffer), however much comes.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from typing import Any

import docker.errors

from hosts.backends.base import (
    BackendError,
    ExecResult,
    HeadTailBuffer,
    OutputCallback,
    SandboxGone,
    Unsupported,
)
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import SANDBOX_USER, container_ref
from hosts.backends.docker.stream import Deadline, ExecStream
from hosts.backends.execscripts import (
    KILL_MARKED,
    NOTICE_SWEEP,
    SWEEP_LIMIT,
    WRAPPER,
    WRAPPER_FAILED,
    Notice,
)

logger = logging.getLogger(__name__)

MARKER_ENV = "SANDHUB_EXEC_ID"
STDIN_ENV = "SANDHUB_STDIN"
# stdin travels base64-encoded in one environment variable, which Linux caps at 128 KiB
# (MAX_ARG_STRLEN); 64 KiB of raw bytes stays well under it once encoded.
MAX_STDIN_BYTES = 64 * 1024

_KILL_AFTER = 2.0  # SIGTERM first; SIGKILL this long after, inside the container
# On top of timeout + _KILL_AFTER before the caller gives up on the stream: the wrapper's sweep
# after a timeout may take up to SWEEP_LIMIT, and must be able to report on its own.
_CLIENT_GRACE = SWEEP_LIMIT + 2.0
INTERNAL_TIMEOUT = 30.0  # mkdir, listing, kill sweeps


class Commands:
    """Runs commands and the backend's own scripts in the sandboxes of one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

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
        """Run argv as the sandbox user.

        stdin, if given, is handed to the command through the environment (base64), so it is
        limited to MAX_STDIN_BYTES; larger input raises Unsupported (upload a file instead).
        On timeout, exit_code is the kill code from inside the container (124 after SIGTERM,
        137 after SIGKILL) or None when the caller's own deadline had to cut the stream.
        """
        if not argv:
            raise BackendError("empty command")
        if timeout <= 0:
            raise BackendError("timeout must be positive")
        if stdin is not None and len(stdin) > MAX_STDIN_BYTES:
            raise Unsupported(
                f"stdin of {len(stdin)} bytes is over the docker backend's {MAX_STDIN_BYTES}-byte "
                "limit; upload a file and redirect from it instead"
            )
        container = container_ref(state)
        marker = uuid.uuid4().hex
        environment = {**env, MARKER_ENV: marker}
        if stdin:
            environment[STDIN_ENV] = base64.b64encode(stdin).decode()
        command = [
            "sh",
            "-c",
            WRAPPER,
            "sandhub-exec",
            cwd,
            f"{timeout:.3f}",
            f"{_KILL_AFTER:g}",
            *argv,
        ]
        out, err = HeadTailBuffer(output_cap), HeadTailBuffer(output_cap)
        notice = Notice(marker)
        started = time.monotonic()
        deadline = started + timeout + _KILL_AFTER + _CLIENT_GRACE
        exec_id, finished = self.run(
            container, command, environment, deadline, out, err, on_output, marker, notice
        )
        duration = time.monotonic() - started
        exit_code = self.exit_code(exec_id, finished)
        if notice.reason is not None and exit_code == WRAPPER_FAILED:
            if notice.kind == NOTICE_SWEEP:
                self._kill_marked(container, marker)
            raise BackendError(notice.reason)
        if finished and _engine_could_not_start(exit_code, out, err):
            message = out.getvalue().decode("utf-8", "replace").strip()
            raise BackendError(
                f"the command could not start: the engine could not create its process ({message})"
            )
        # `timeout` exits 124 (or 137 if SIGKILL was needed); a command may exit so itself,
        # e.g. 137 when the OOM killer hits it, but not after running for the whole timeout.
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

    def run(
        self,
        container: str,
        command: list[str],
        environment: dict[str, str],
        deadline: float,
        out: HeadTailBuffer,
        err: HeadTailBuffer,
        on_output: OutputCallback | None,
        marker: str | None,
        notice: Notice | None = None,
    ) -> tuple[str, bool]:
        """Start an exec and pump its output until EOF or the deadline.

        Returns (exec id, finished); finished is False when the deadline cut the stream, in
        which case the marked processes have been killed. stderr also goes to `notice`.
        """
        exec_id, stream = self.start(container, command, environment)
        buffers = {1: out, 2: err}
        names = {1: "stdout", 2: "stderr"}
        try:
            for kind, chunk in stream.frames(lambda: deadline):
                buffers.get(kind, err).write(chunk)
                if notice is not None and kind != 1:
                    notice.feed(chunk)
                if on_output is not None:
                    on_output(names.get(kind, "stderr"), chunk)
            return exec_id, True
        except Deadline:
            stream.close()
            if marker:
                self._kill_marked(container, marker)
            return exec_id, False
        except BaseException:
            # A failing callback or an interrupt must not leave the command running.
            stream.close()
            if marker:
                self._kill_marked(container, marker)
            raise
        finally:
            stream.close()

    def start(
        self, container: str, command: list[str], environment: dict[str, str]
    ) -> tuple[str, ExecStream]:
        api = self.engine.api()
        with self.engine.errors("running a command"):
            try:
                exec_id = api.exec_create(
                    container,
                    command,
                    stdout=True,
                    stderr=True,
                    stdin=False,
                    tty=False,
                    environment=environment,
                    user=SANDBOX_USER,
                    workdir="/",
                )["Id"]
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"sandbox container {container} no longer exists") from exc
            except docker.errors.APIError as exc:
                if exc.status_code == 409:
                    raise BackendError(f"sandbox container {container} is not running") from exc
                raise
            return exec_id, ExecStream(api.exec_start(exec_id, socket=True))

    def _kill_marked(self, container: str, marker: str) -> None:
        """Best effort, from a second exec: the caller already has its answer (timed out)."""
        sink = HeadTailBuffer(4096)
        try:
            self.run(
                container,
                ["sh", "-c", KILL_MARKED, "sandhub-kill", marker],
                {},
                time.monotonic() + INTERNAL_TIMEOUT,
                sink,
                sink,
                None,
                None,
            )
        except Exception:
            logger.warning(
                "could not kill the processes of exec %s in %s on host %s",
                marker,
                container,
                self.engine.host,
                exc_info=True,
            )

    def exit_code(self, exec_id: str, finished: bool) -> int | None:
        """The exec's exit code; the engine may record it a moment after the stream closes."""
        api = self.engine.api()
        for _ in range(100 if finished else 1):
            with self.engine.errors("reading a command's exit code"):
                info = api.exec_inspect(exec_id)
            if not info.get("Running"):
                return info.get("ExitCode") if finished else None
            time.sleep(0.01)
        return None

    def internal(
        self, state: dict[str, Any], script: str, *args: str, cap: int = 64 * 1024
    ) -> tuple[int | None, bytes, str]:
        """Run one of our own scripts; (exit code, stdout, stderr as text)."""
        result = self.exec(
            state,
            ["sh", "-c", script, "sandhub", *args],
            cwd="/",
            env={},
            timeout=INTERNAL_TIMEOUT,
            output_cap=cap,
        )
        if result.timed_out:
            raise BackendError(f"the sandbox did not answer within {INTERNAL_TIMEOUT:g} s")
        if result.stdout_truncated:
            raise BackendError("the answer was too large")
        return result.exit_code, result.stdout, result.stderr.decode("utf-8", "replace").strip()


def _engine_could_not_start(
    exit_code: int | None, out: HeadTailBuffer, err: HeadTailBuffer
) -> bool:
    """The runtime failed to start the exec (e.g. it could not clone with the pids limit
    used up): the engine then writes its error as the only output, and exit code 126."""
    return (
        exit_code == 126
        and err.total == 0
        and out.total < 1024
        and out.getvalue().startswith(b"OCI runtime exec failed")
    )
