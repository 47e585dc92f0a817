"""The platform's processes of the layout, each in a session of its own so a fault can
SIGKILL it the way a crash would, and a supervisor's restart bring it back. Not a test module.

- `WebProcess`: scripts/web.sh (uvicorn with the request-head limit) with one worker on a
  loopback port of its own, on the test database;
- the workers: tests/qcluster.py's `QCluster` (`manage.py qcluster`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.live import ROOT, free_port, subprocess_env


class WebProcess:
    """One web process as scripts/web.sh starts it, with SANDHUB_WEB_WORKERS=1: the process
    we start is the uvicorn that serves (no supervisor process in between)."""

    def __init__(self, name: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_path
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 60.0) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        env = subprocess_env(
            SANDHUB_BIND_HOST="127.0.0.1",
            SANDHUB_BIND_PORT=str(self.port),
            SANDHUB_WEB_WORKERS="1",
            **self.env,
        )
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(ROOT / "scripts" / "web.sh")],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started_at = time.monotonic()
        deadline = time.monotonic() + timeout
        while not self._listening():
            if not self.alive:
                raise RuntimeError(f"{self.name} exited at start:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} not listening after {timeout:g} s")
            time.sleep(0.05)

    def _listening(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def kill(self) -> None:
        """SIGKILL to the process group, as a crash would (kill -9)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.process = None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (uvicorn finishes its requests), then SIGKILL."""
        if self.alive and self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        self.kill()

    def log_tail(self, size: int = 3000) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-size:]
