"""A web process (tests/webprocess.py: scripts/web.sh, one worker unless told) on a loopback
port of the test's choosing, on the test database, that a test can freeze and kill -9, and
whether a request waits at that port unanswered. Not a test module.

A request that a web process has received and dies without answering is what issue 28's
killed worker left its clients with: their connection reset with no response. Frozen
(SIGSTOP) before the request arrives, the process cannot answer it, so the test kills it
with the request in hand without racing it.
"""

from __future__ import annotations

from pathlib import Path

from tests.webprocess import WebProcess

_ESTABLISHED = "01"


def start_web(port: int, log: Path, workers: int = 1, **env: str) -> WebProcess:
    """A started web process on `port` (a killed one's, to restart it in its place)."""
    return WebProcess(log, port, workers=workers, env=env).start()


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
