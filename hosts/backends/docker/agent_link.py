"""The sandbox agent in Docker sandboxes: started over one exec each, cached per container.

The agent (hosts/backends/agent/) runs as the sandbox user in ONE long-lived exec with stdin
attached: `python3 -I -u -c BOOTSTRAP`, its source sent over that stdin. Nothing is baked
into the image and nothing listens on a port. The exec's hijacked connection is the
transport; the engine multiplexes the exec's stdout and stderr on it (tty off), in frames of
an 8-byte header and a payload, which DockerTransport takes apart: stdout carries the
agent's frames, stderr its diagnostics.

AgentLink keeps one live AgentClient per container in this process and starts a new one
when the last one's stream broke. An image without python3 raises AgentUnavailable (the
caller uses the per-command exec path, exec.py); that answer is remembered for a while so
such a sandbox does not pay a failed start on every command. A stream that broke because
the container went away raises SandboxGone.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import threading
import time
from typing import IO, Any

import docker.errors

from hosts.backends.agent.client import (
    AgentBroken,
    AgentClient,
    AgentStartFailed,
    AgentUnavailable,
    ExecCall,
)
from hosts.backends.agent.protocol import BOOTSTRAP
from hosts.backends.base import (
    BackendError,
    ExecResult,
    FileEntry,
    OutputCallback,
    PortStream,
    SandboxGone,
)
from hosts.backends.docker.background import JOBS_DIR, log_keep_bytes
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import SANDBOX_USER, container_ref, names
from hosts.backends.jobscripts import KILL_AFTER, RUNNER, check_job

__all__ = ["AgentLink", "AgentUnavailable", "DockerTransport"]

logger = logging.getLogger(__name__)

UNAVAILABLE_FOR = 300.0  # seconds a sandbox found without python3 is not asked again
_READ_SIZE = 64 * 1024
# A cancel: SIGTERM, KILL_AFTER s of grace, then the sweep (up to its own 10 s limit).
CANCEL_TIMEOUT = 30.0
_STDERR_KEEP = 8192
# What the engine says when the exec's program is missing (on the exec's stdout).
_MISSING = ("executable file not found", "no such file or directory")


class DockerTransport:
    """The hijacked connection of an exec with stdin: writes go to the exec's stdin, reads are
    the exec's stdout with the engine's stream frames taken off (stderr is kept aside)."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        # Reads go through the HTTP response's buffered reader when there is one: it may
        # already hold the first bytes, read along with the response headers (exec.py).
        response = getattr(sock, "_response", None)
        fp = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
        self._reader = fp if isinstance(fp, io.BufferedReader) else None
        self._response = response
        self._raw = getattr(sock, "_sock", sock)
        self._raw.settimeout(None)  # an idle agent is fine: the client's calls keep deadlines
        self._header = bytearray()
        self._kind = 0
        self._left = 0
        self._stderr = bytearray()
        self._closed = False

    def recv(self) -> bytes:
        while True:
            if self._reader is not None:
                data = self._reader.read1(_READ_SIZE)
            elif hasattr(self._sock, "recv"):
                data = self._sock.recv(_READ_SIZE)
            else:
                data = self._sock.read(_READ_SIZE) or b""
            if not data:
                return b""
            out = self._split(data)
            if out:
                return out

    def _split(self, data: bytes) -> bytes:
        out = bytearray()
        view = memoryview(data)
        while view:
            if self._left == 0:
                need = 8 - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) < 8:
                    break
                self._kind = self._header[0]
                self._left = int.from_bytes(self._header[4:8], "big")
                self._header.clear()
                continue
            piece = view[: self._left]
            view = view[len(piece) :]
            self._left -= len(piece)
            if self._kind == 2:
                self._stderr += piece
                del self._stderr[:-_STDERR_KEEP]
            else:
                out += piece
        return bytes(out)

    def sendall(self, data: bytes) -> None:
        self._raw.sendall(data)

    def close(self) -> None:
        # The connection was hijacked: it can never go back to the pool, so close it for good.
        # shutdown first: it ends a recv() blocked in the reader thread, and the engine
        # closes the agent's stdin (the agent then stops its commands and exits).
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._raw.shutdown(socket.SHUT_RDWR)
        for closable in (self._response, self._sock, self._raw):
            with contextlib.suppress(Exception):
                if closable is not None:
                    closable.close()

    def said(self) -> str:
        return self._stderr.decode("utf-8", "replace").strip()


class AgentLink:
    """The agents of one engine's sandboxes: one live client per container in this process."""

    def __init__(self, engine: Engine, *, python: str = "python3") -> None:
        self.engine = engine
        self.python = python
        self._lock = threading.Lock()
        self._clients: dict[str, AgentClient] = {}
        self._starting: dict[str, threading.Lock] = {}
        self._unavailable: dict[str, tuple[float, str]] = {}

    # --- clients -------------------------------------------------------------------------------
    def running(self, state: dict[str, Any]) -> bool:
        """Whether the sandbox has a live agent in this process already."""
        with self._lock:
            client = self._clients.get(container_ref(state))
            return client is not None and client.alive

    def client(self, state: dict[str, Any]) -> AgentClient:
        """The sandbox's live agent, started if there is none. AgentUnavailable: the image
        cannot run it (use the per-command path); SandboxGone: the container is gone."""
        container = container_ref(state)
        with self._lock:
            client = self._clients.get(container)
            if client is not None and client.alive:
                return client
            starting = self._starting.setdefault(container, threading.Lock())
        with starting:  # one start per container at a time; the others take its client
            with self._lock:
                client = self._clients.get(container)
                if client is not None and client.alive:
                    return client
                refused = self._unavailable.get(container)
            if refused is not None and time.monotonic() - refused[0] < UNAVAILABLE_FOR:
                raise AgentUnavailable(refused[1])
            old = client
            client = self._start(container)
            with self._lock:
                self._clients[container] = client
                self._unavailable.pop(container, None)
        if old is not None and old.abandoned and old.pid:
            # It did not answer (stopped, say): an agent that stops reading never sees the
            # end of its input, so it would stay for good.
            with contextlib.suppress(BackendError):
                client.kill_agent(old.pid, timeout=10)
        return client

    def _start(self, container: str) -> AgentClient:
        api = self.engine.api()
        with self.engine.errors("starting the sandbox agent"):
            try:
                exec_id = api.exec_create(
                    container,
                    [self.python, "-I", "-u", "-c", BOOTSTRAP],
                    stdin=True,
                    stdout=True,
                    stderr=True,
                    tty=False,
                    user=SANDBOX_USER,
                    workdir="/",
                )["Id"]
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"sandbox container {container} no longer exists") from exc
            except docker.errors.APIError as exc:
                if exc.status_code == 409:
                    raise BackendError(f"sandbox container {container} is not running") from exc
                raise
            sock = api.exec_start(exec_id, socket=True)
        try:
            return AgentClient(DockerTransport(sock), label=container[:12])
        except AgentStartFailed as exc:
            said = f"{exc.early.decode('utf-8', 'replace')} {exc.said}".strip()
            if any(text in said.lower() for text in _MISSING) or "SyntaxError" in said:
                reason = (
                    f"the sandbox agent cannot run in {container}: the image has no usable "
                    f"{self.python} ({said[-300:]})"
                )
                with self._lock:
                    self._unavailable[container] = (time.monotonic(), reason)
                raise AgentUnavailable(reason) from exc
            self._check_gone(container)
            raise

    def forget(self, state: dict[str, Any]) -> None:
        """Drop the sandbox's agent (it is being destroyed, or was replaced). A state with no
        container (a lone volume, network or disk that reconciliation removes) has none."""
        container, _ = names(state)
        if not container:
            return
        with self._lock:
            client = self._clients.pop(container, None)
            self._unavailable.pop(container, None)
            self._starting.pop(container, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            client.close()

    def _check_gone(self, container: str) -> None:
        """After a broken stream: SandboxGone if the container is gone or going (a forced
        removal kills it first, so the stream may break a moment before it is gone)."""
        give_up, looks = time.monotonic() + 2.0, 0
        while True:
            looks += 1
            try:
                info = self.engine.api().inspect_container(container)
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"sandbox container {container} no longer exists") from exc
            except Exception:  # the engine cannot say: the caller's own error stands
                return
            status = info.get("State", {}).get("Status")
            if status in ("removing", "dead"):
                raise SandboxGone(f"sandbox container {container} is being removed")
            if status == "running" and looks > 1:  # twice: a kill may not show at once
                return
            if time.monotonic() > give_up:
                raise BackendError(f"sandbox container {container} is not running ({status})")
            time.sleep(0.1)

    # --- operations ----------------------------------------------------------------------------
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
        live_limit: int | None = None,
        grace: float | None = None,
    ) -> ExecResult:
        """SandboxBackend.exec through the agent (never retried: the command may have run).
        live_limit and grace: as AgentClient.start_exec (live output a stream; the caller's
        own deadline past timeout + kill_after)."""
        client = self.client(state)
        call: ExecCall | None = None
        try:
            call = client.start_exec(
                argv,
                cwd=cwd,
                env=env,
                timeout=timeout,
                output_cap=output_cap,
                on_output=on_output,
                stdin=stdin,
                live_limit=live_limit,
                grace=grace,
            )
            result = call.wait()
        except AgentBroken:
            self._check_gone(container_ref(state))
            if call is not None and not client.closed:
                self._kill_orphan(state, call.marker)
            raise
        if not client.alive and call is not None:  # cut by the deadline, agent dropped
            self._kill_orphan(state, call.marker)
        return result

    def _kill_orphan(self, state: dict[str, Any], marker: str) -> None:
        """The command's agent died under it: a new agent kills what carries its marker
        (nothing else would enforce its timeout now). Best effort."""
        try:
            self.client(state).kill_marked(marker, timeout=30)
        except SandboxGone:
            raise
        except Exception:
            self._check_gone(container_ref(state))  # no new agent: is the sandbox going?
            logger.warning("could not kill the processes of command %s", marker, exc_info=True)

    def read_file(
        self, state: dict[str, Any], path: str, *, offset: int = 0, length: int
    ) -> tuple[int, bytes]:
        return self._idempotent(state, lambda c: c.read_file(path, offset=offset, length=length))

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        return self._idempotent(state, lambda c: c.list_dir(path))

    def open_port(self, state: dict[str, Any], port: int, timeout: float) -> PortStream:
        """A stream to the sandbox's own listener on 127.0.0.1:port, through its agent (so a
        sandbox without network serves it too); opening is tried again on a new agent if the
        stream broke. PortClosed: nothing of the sandbox's listens there."""
        return self._idempotent(state, lambda client: client.open_port(port, timeout))

    def write_file(
        self, state: dict[str, Any], path: str, content: bytes | IO[bytes], *, mode: int = 0o644
    ) -> int:
        try:
            return self.client(state).write_file(path, content, mode=mode)
        except AgentBroken:
            self._check_gone(container_ref(state))
            raise

    def _idempotent(self, state: dict[str, Any], operation: Any) -> Any:
        """Reads and listings: tried again once on a new agent if the stream broke."""
        try:
            return operation(self.client(state))
        except AgentBroken:
            self._check_gone(container_ref(state))
        return operation(self.client(state))

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
        """As background.Jobs.start_background, through the agent: the same runner, files
        and job dict, so Jobs.poll_background and cancel_background work on the job."""
        check_job(argv, job_id, timeout)
        directory = f"{JOBS_DIR}/{job_id}"
        limit = "0" if timeout is None else f"{timeout:.3f}"
        keep = log_keep_bytes()
        runner = ["nohup", "sh", "-c", RUNNER, "sandhub-job", directory, cwd, limit, str(keep)]
        try:
            pid = self.client(state).start_job(job_id, directory, [*runner, *argv], env)
        except AgentBroken:
            self._check_gone(container_ref(state))
            raise
        except OSError as exc:  # as the per-command path says it (background.py)
            raise BackendError(f"could not start job {job_id}: {exc}") from exc
        return {
            "job_id": job_id,
            "dir": directory,
            "log": f"{directory}/log",
            "pid": pid,
            "timeout": timeout,
            "log_keep": keep,
        }

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        """As background.Jobs.cancel_background, from the running agent: an engine exec
        cannot start while a fork bomb holds the sandbox's pids and memory."""
        done = self._idempotent(
            state,
            lambda client: client.cancel_job(
                job["job_id"], job["dir"], job.get("pid"), KILL_AFTER, CANCEL_TIMEOUT
            ),
        )
        if not done:
            raise BackendError(f"processes of job {job['job_id']} survive SIGKILL")
