"""A web process (scripts/web.sh, one worker unless told) on a loopback port of the test's
choosing, on the test database, that a test can freeze and kill -9, and whether a request
waits at that port unanswered. Not a test module.

A request that a web process has received and dies without answering is what issue 28's
killed worker left its clients with: their connection reset with no response. Frozen
(SIGSTOP) before the request arrives, the process cannot answer it, so the test kills it
with the request in hand without racing it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx

from tests.live import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
_ESTABLISHED = "01"


@dataclass
class WebProcess:
    port: int
    process: subprocess.Popen
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def freeze(self) -> None:
        os.killpg(self.process.pid, signal.SIGSTOP)

    def kill(self) -> None:
        """SIGKILL to the whole process group at once, as a crash would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGCONT)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


def start_web(port: int, log: Path, workers: int = 1, **env: str) -> WebProcess:
    environ = subprocess_env(
        SANDHUB_BIND_HOST="127.0.0.1",
        SANDHUB_BIND_PORT=str(port),
        SANDHUB_WEB_WORKERS=str(workers),
        **env,
    )
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [str(ROOT / "scripts" / "web.sh")],
            cwd=ROOT,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: kill() takes uvicorn and all it started
        )
    web = WebProcess(port, process, log)
    deadline = time.monotonic() + 90
    while not _answers(web):
        if process.poll() is not None or time.monotonic() > deadline:
            web.stop()
            raise RuntimeError(f"scripts/web.sh did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return web


def _answers(web: WebProcess) -> bool:
    try:
        return httpx.get(f"{web.url}/login/", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def request_waiting(port: int) -> bool:
    """Whether request bytes wait unread at the server end of a connection to `port`
    (received by the kernel for the web process, not read by it: it is frozen)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local = int(fields[1].split(":")[1], 16)
        unread = int(fields[4].split(":")[1], 16)
        if fields[3] == _ESTABLISHED and local == port and unread:
            return True
    return False
