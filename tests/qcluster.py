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

import os
import sys
import time
from pathlib import Path
from urllib.parse import quote

from tests.webprocess import SessionProcess

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


class QCluster(SessionProcess):
    """One `manage.py qcluster` at a time; its output goes to `log_path`. Killing, stopping
    and the log are tests/webprocess.py's `SessionProcess`: the web process's too."""

    stop_seconds = 30.0  # SIGTERM lets the workers finish their current task

    def __init__(self, log_path: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(log_path)
        self.env = env or {}

    def start(self, timeout: float = 30.0) -> None:
        """Start a cluster and wait until it says it is running."""
        if self.alive:
            raise RuntimeError("a qcluster is already running")
        env = {**os.environ, "DATABASE_URL": subprocess_database_url(), **self.env}
        env.pop("SANDHUB_API_KEY", None)
        self._spawn([sys.executable, "manage.py", "qcluster"], env)
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.log_since_start():
            if not self.alive:
                raise RuntimeError(f"qcluster exited at start:\n{self.log_since_start()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"qcluster not running after {timeout:g} s:\n{self.log()}")
            time.sleep(0.05)
