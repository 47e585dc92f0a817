"""A real django-q2 cluster (`manage.py qcluster`) in a subprocess, on the test database.

A test gets one through the `qcluster` fixture (tests/conftest.py), and must be
transactional (`transactional_db`, or `pytest.mark.django_db(transaction=True)`): the worker
is another process and sees only committed rows. The subprocess gets the test database as
DATABASE_URL (the SQLite test database is a file, see settings; on PostgreSQL pytest-django's
`test_<NAME>`). Not a test module.

The cluster runs in a session of its own, so `kill()` can take the whole process tree down
with SIGKILL at once, as a crash would, and `start()` brings up a fresh one. `stop()` is the
clean way: SIGTERM to the main process, which lets workers finish their current task.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
READY_LINE = "running."  # django-q2 logs "Q Cluster <name> running." once it guards workers


def subprocess_database_url() -> str:
    """The database this test run uses, as a URL for a subprocess."""
    from django.db import connection

    config = connection.settings_dict
    if config["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{config['NAME']}"
    user = quote(config.get("USER") or "", safe="")
    password = f":{quote(config['PASSWORD'], safe='')}" if config.get("PASSWORD") else ""
    credentials = f"{user}{password}@" if user else ""
    host = config.get("HOST") or "localhost"
    port = f":{config['PORT']}" if config.get("PORT") else ""
    return f"postgres://{credentials}{host}{port}/{quote(config['NAME'], safe='')}"


class QCluster:
    """One `manage.py qcluster` at a time; its output goes to `log_path`."""

    def __init__(self, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self.env = env or {}
        self.process: subprocess.Popen | None = None
        self._log_offset = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        """Start a cluster and wait until it says it is running."""
        if self.alive:
            raise RuntimeError("a qcluster is already running")
        env = {**os.environ, "DATABASE_URL": subprocess_database_url(), **self.env}
        env.pop("SANDHUB_API_KEY", None)
        with open(self.log_path, "ab") as log:
            self._log_offset = log.tell()
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() gets every process
            )
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.log_since_start():
            if not self.alive:
                raise RuntimeError(f"qcluster exited at start:\n{self.log_since_start()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"qcluster not running after {timeout:g} s:\n{self.log()}")
            time.sleep(0.05)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the main process (workers finish their task), then SIGKILL to all."""
        if self.process is None:
            return
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
        self.kill()

    def kill(self) -> None:
        """SIGKILL to every process of the cluster at once, as a crash would."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_since_start(self) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")
