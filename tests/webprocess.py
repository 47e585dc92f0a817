"""The platform's processes as the tests start them: each a subprocess in a session of its
own, so a test can SIGKILL the whole process tree at once, the way a crash would. Not a test
module.

- `SessionProcess`: the shared part (spawn into a log file, kill, stop, freeze, thaw, the log's
  tail); tests/qcluster.py's `QCluster` (`manage.py qcluster`) is one.
- `WebProcess`: the web process as scripts/web.sh starts it (uvicorn with the request-head
  limit), on a loopback port, on the test database. The tests of lost connections, JSON logs,
  tracing, metrics, the nginx deployment and the multi-node layout all start it through this
  one class, so they all test the script the deployments run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx2 as httpx

from tests.live import ROOT, free_port, subprocess_env

LOG_TAIL_CHARS = 3000


def kill_group(process: subprocess.Popen[bytes]) -> int:
    """SIGKILL to the process group of `process` (started with start_new_session=True) at
    once, as a crash would (kill -9); its return code. Only while its group is known to be
    its own: not again after this (its pid may be another process's by then)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    return process.wait(10)


def stop_group(process: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM to the main process (a graceful stop: it finishes what it serves), then
    SIGKILL to the group, if it lingers, and to whatever of the group is left after it."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)
    return kill_group(process)


class SessionProcess:
    """One subprocess at a time, in a session (so a process group) of its own, its output
    appended to `log_path`. A subclass starts it with `_spawn` and waits for what "ready"
    means to it."""

    stop_seconds = 15.0  # how long stop() lets SIGTERM work before SIGKILL

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        # Kept after the process ends: tests read its pid and return code afterwards.
        self.process: subprocess.Popen[bytes] | None = None
        self._group_killed = False
        self._log_offset = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _spawn(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            self.process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: kill() takes it and all it started
            )
        self._group_killed = False
        return self.process

    def kill(self) -> int | None:
        """SIGKILL to the whole process group at once, as a crash would (kill -9); the
        process's return code (None if never started)."""
        if self.process is None:
            return None
        if self._group_killed:
            return self.process.returncode
        self._group_killed = True
        return kill_group(self.process)

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM to the main process (it finishes what it serves), SIGKILL to the group
        if it lingers and to whatever of the group is left after it."""
        if self.process is None or self._group_killed:
            return
        self.thaw()  # a frozen process cannot act on SIGTERM
        self._group_killed = True
        stop_group(self.process, self.stop_seconds if timeout is None else timeout)

    def freeze(self) -> None:
        """SIGSTOP to the group: the process holds whatever reaches it, unanswered."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_since_start(self) -> str:
        """What the process of the last start logged (the file may hold earlier runs')."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")

    def log_tail(self, size: int = LOG_TAIL_CHARS) -> str:
        return self.log()[-size:]


class WebProcess(SessionProcess):
    """scripts/web.sh on 127.0.0.1:`port` (a free one unless given) with `workers` uvicorn
    workers and `env` on top of the test environment (the test database's URL among it).

    With one worker the process started is the uvicorn that serves (web.sh execs it), so its
    pid is the one the platform records. `start()` returns once the web process answers: a 200
    from `ready_path` (sent with `host_header` if the test's ALLOWED_HOSTS needs one), or with
    `ready_path=None` a connection accepted on the port. Restartable on the same port."""

    def __init__(
        self,
        log_path: Path,
        port: int | None = None,
        *,
        workers: int = 1,
        env: dict[str, str] | None = None,
        name: str = "scripts/web.sh",
        ready_path: str | None = "/login/",
        host_header: str | None = None,
    ) -> None:
        super().__init__(log_path)
        self.port = free_port() if port is None else port
        self.workers = workers
        self.env = env or {}
        self.name = name
        self.ready_path = ready_path
        self.host_header = host_header
        self.started_at = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> WebProcess:
        """Start it and wait until it answers; if it exits or never answers, raise with the
        log's tail (and leave nothing of it running)."""
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        env = subprocess_env(
            SANDHUB_BIND_HOST="127.0.0.1",
            SANDHUB_BIND_PORT=str(self.port),
            SANDHUB_WEB_WORKERS=str(self.workers),
            **self.env,
        )
        self._spawn([str(ROOT / "scripts" / "web.sh")], env)
        self.started_at = time.monotonic()
        deadline = self.started_at + timeout
        while not self._answers():
            if not self.alive:
                self.kill()
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"{self.name} did not answer in {timeout:g} s:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        if self.ready_path is None:
            with socket.socket() as sock:
                sock.settimeout(0.5)
                return sock.connect_ex(("127.0.0.1", self.port)) == 0
        headers = {"Host": self.host_header} if self.host_header else {}
        try:
            response = httpx.get(f"{self.url}{self.ready_path}", headers=headers, timeout=5)
        except httpx.TransportError:
            return False
        return response.status_code == 200
