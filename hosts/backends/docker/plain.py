"""Engine execs: the Docker kind's one exec primitive (fallback/primitive.py) and the start
and exit code of any exec (commands, tar streams, the agent).

stdin reaches a command through the exec wrapper (execscripts.WRAPPER), base64-encoded in one
environment variable: an exec's stdin would need the connection held open both ways for the
whole command. Linux caps one variable at 128 KiB (MAX_ARG_STRLEN), so stdin is limited to
MAX_STDIN_BYTES; larger input is refused (upload a file and redirect from it instead).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

import docker.errors

from hosts.backends.base import BackendError, SandboxGone
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import SANDBOX_USER, container_ref
from hosts.backends.docker.stream import ExecStream
from hosts.backends.fallback.primitive import CouldNotStart, Output

__all__ = ["MAX_STDIN_BYTES", "ContainerNotRunning", "DockerPlainExec", "exit_code", "open_exec"]

STDIN_ENV = "SANDHUB_STDIN"
MAX_STDIN_BYTES = 64 * 1024  # 64 KiB of raw bytes stays well under 128 KiB once encoded
_NOT_STARTED = 126  # what the engine answers for an exec whose process it could not create


class ContainerNotRunning(BackendError):
    """The engine refused an exec: the container is stopped or paused."""


def open_exec(
    engine: Engine,
    container: str,
    argv: list[str],
    *,
    environment: dict[str, str] | None = None,
    stdin: bool = False,
    workdir: str = "/",
    doing: str = "running a command",
) -> tuple[str, ExecStream]:
    """Start argv as the sandbox user in the container: (exec id, its stream)."""
    api = engine.api()
    with engine.errors(doing):
        try:
            exec_id = api.exec_create(
                container,
                argv,
                stdout=True,
                stderr=True,
                stdin=stdin,
                tty=False,
                environment=environment or {},
                user=SANDBOX_USER,
                workdir=workdir,
            )["Id"]
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"sandbox container {container} no longer exists") from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise ContainerNotRunning(f"sandbox container {container} is not running") from exc
            raise
        return exec_id, ExecStream(api.exec_start(exec_id, socket=True))


def exit_code(engine: Engine, exec_id: str, *, finished: bool = True) -> int | None:
    """The exec's exit code; the engine may record it a moment after the stream closes."""
    api = engine.api()
    for _ in range(100 if finished else 1):
        with engine.errors("reading a command's exit code"):
            info = api.exec_inspect(exec_id)
        if not info.get("Running"):
            return info.get("ExitCode") if finished else None
        time.sleep(0.01)
    return None


class DockerPlainExec:
    """One engine exec per call, its output read as it comes."""

    max_stdin: int | None = MAX_STDIN_BYTES

    def __init__(
        self, engine: Engine, revive: Callable[[dict[str, Any]], bool] | None = None
    ) -> None:
        self.engine = engine
        self.revive = revive  # as DockerAgentPlace's: a container its engine stopped

    def run(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        env: dict[str, str],
        stdin: bytes | None,
        deadline: float,
        output: Output,
        cwd: str | None = None,
    ) -> int | None:
        environment = dict(env)
        if stdin:
            environment[STDIN_ENV] = base64.b64encode(stdin).decode()

        def start() -> tuple[str, ExecStream]:
            return open_exec(
                self.engine, container_ref(state), argv, environment=environment, workdir=cwd or "/"
            )

        try:
            exec_id, stream = start()
        except ContainerNotRunning:
            if self.revive is None or not self.revive(state):
                raise
            exec_id, stream = start()
        # The runtime's own failure to start the process (it could not clone with the pids
        # limit used up) comes as the only output, on stdout, with exit code 126.
        head, others = bytearray(), 0
        try:
            for kind, chunk in stream.frames(lambda: deadline):
                if kind == 1 and len(head) < 1024:
                    head += chunk
                else:
                    others += len(chunk)
                output("stdout" if kind == 1 else "stderr", chunk)
        finally:
            stream.close()
        code = exit_code(self.engine, exec_id)
        if code == _NOT_STARTED and not others and head.startswith(b"OCI runtime exec failed"):
            said = head.decode("utf-8", "replace").strip()
            raise CouldNotStart(f"the engine could not create its process ({said})")
        return code
