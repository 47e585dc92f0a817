"""The faults injected during the load, at set offsets: kill -9 of a web process (restarted
a few seconds later, as a supervisor would), kill -9 of a worker (restarted), a restart of the
second engine's dockerd, and the SSH connections cut (the sshd processes serving them are
SIGKILLed: the platform's connections drop as on a network cut). Not a test module."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.layout import Layout
from tests.ssh.sshd import descendants

WEB_DOWN_SECONDS = 5.0  # a supervisor's restart delay
WORKER_DOWN_SECONDS = 3.0


@dataclass
class Fault:
    name: str
    offset: float  # seconds after the load's start
    action: Callable[[], None]
    started: float = 0.0  # monotonic, when done
    ended: float = 0.0
    skipped: str = ""  # why the fault could not be made here
    notes: dict[str, object] = field(default_factory=dict)

    def run(self) -> None:
        self.started = time.monotonic()
        if not self.skipped:
            self.action()
        self.ended = time.monotonic()


def kill_web(layout: Layout, index: int, fault: Fault) -> Callable[[], None]:
    def action() -> None:
        web = layout.webs[index]
        web.kill()
        fault.notes["killed_at"] = time.monotonic()
        time.sleep(WEB_DOWN_SECONDS)  # down for a while, as before a supervisor restarts it
        web.start()

    return action


def kill_worker(layout: Layout, index: int) -> Callable[[], None]:
    def action() -> None:
        worker = layout.workers[index]
        worker.kill()
        time.sleep(WORKER_DOWN_SECONDS)
        worker.start()

    return action


def sshd_sessions(sshd_pid: int) -> list[int]:
    """The sshd processes serving connections: the listener's children."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == sshd_pid:
                found.append(int(entry.name))
    return found


def serving_processes(sshd_pid: int, *, whole: bool = True) -> list[int]:
    """The sshd processes serving connections: each session's privileged monitor (the
    listener's child) and, if `whole`, the unprivileged sshd below it that holds the socket.
    Killing only the monitors leaves each connection half alive: the socket stays open until
    the next request that needs the monitor (a new command), which then ends it."""
    monitors = sshd_sessions(sshd_pid)
    if not whole:
        return monitors
    below = [pid for monitor in monitors for pid in descendants(monitor) if _is_sshd(pid)]
    return monitors + below


def _is_sshd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "sshd"
    except OSError:
        return False


def kill_serving(sshd_pid: int, *, whole: bool = True) -> None:
    """SIGKILL the processes serving the sshd's connections (serving_processes): with
    `whole`, as a cut of the network, the platform's connections end at once."""
    for pid in serving_processes(sshd_pid, whole=whole):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def cut_ssh(layout: Layout, fault: Fault) -> Callable[[], None]:
    def action() -> None:
        process = layout.sshd.process
        assert process is not None, "the test sshd is not running"
        fault.notes["connections_cut"] = len(sshd_sessions(process.pid))
        kill_serving(process.pid)

    return action


def schedule(layout: Layout, seconds: float) -> list[Fault]:
    """The faults of a load of `seconds`, spread over it with time to recover between."""
    web = Fault("kill -9 web1", 0.15 * seconds, lambda: None)
    web.action = kill_web(layout, 1, web)
    worker = Fault("kill -9 worker1", 0.35 * seconds, kill_worker(layout, 1))
    engine = layout.engines["engine2"]
    dockerd = Fault("restart dockerd2", 0.55 * seconds, engine.restart or (lambda: None))
    if engine.restart is None:
        dockerd.skipped = f"{engine.name} is not restarted here"
    ssh = Fault("cut SSH connections", 0.75 * seconds, lambda: None)
    ssh.action = cut_ssh(layout, ssh)
    return [web, worker, dockerd, ssh]
