"""Processes: the fork-free /proc sweep and the kept output of a command (part 2 of the agent).

`sweep` stops, then kills, every process a predicate names, and returns once none is left and
every killed one is reaped. It forks nothing, so it works while a fork bomb holds the pids
limit. It stops each process before killing any: a killed member of a fork bomb frees a pid
that another fills at once, while a stopped one forks nothing. A round is quiet (and the
stopped ones are killed) only when it stopped nothing new and no process new since the last
listing vanished before it was looked at (it may have forked a child no listing has seen).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

SWEEP_LIMIT = 10.0  # seconds a sweep may take before it reports failure
# After a command ends, a holder of its output that is running and has had under this much CPU
# is spared for up to SPARE_SECONDS: `cmd >log &` holds the pipe from the fork until its
# redirection (as the per-command path's exec wrapper does, hosts/backends/execscripts.py).
SPARE_CPU_NS = 100 * 1000 * 1000
SPARE_SECONDS = 1.0

if TYPE_CHECKING:  # (a runtime alias would need Python 3.9 for tuple[...])
    ProcStat = tuple[str, int, int, int]  # state, ppid, process group, session


def proc_stat(pid: int) -> ProcStat | None:
    """(state, ppid, pgrp, session) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            # After the command name's last ")", which may itself hold ") ".
            fields = handle.read().rpartition(b")")[2].split()
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def marked(pid: int, needle: bytes) -> bool:
    """Whether the process's environment holds needle (b"\\0NAME=value\\0")."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return needle in b"\0" + handle.read()
    except OSError:
        return False


def holds(pid: int, links: set[str]) -> bool:
    """Whether the process has one of `links` (e.g. "pipe:[1234]") open, on any descriptor."""
    base = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            with contextlib.suppress(OSError):
                if os.readlink(f"{base}/{name}") in links:
                    return True
    return False


def cpu_ns(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as handle:
            return int(handle.read().split()[0])
    except (OSError, IndexError, ValueError):
        return 0


def signal_quietly(pid: int, number: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, number)


def sweep(
    ours: Callable[[int, ProcStat], bool], spare_until: float = 0.0, limit: float = SWEEP_LIMIT
) -> bool:
    """Stop, then kill, every process ours(pid, stat) names, until none is left and every
    killed one is reaped. True when done; False if some survived `limit` seconds."""
    me = os.getpid()
    stopped: set[int] = set()
    killed: set[int] = set()
    listed: set[int] = set()
    end = time.monotonic() + limit
    while True:
        now = time.monotonic()
        busy = fresh = False  # fresh: this round stopped (or may have missed) something new
        current = set()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            pid = int(name)
            current.add(pid)
            info = proc_stat(pid)
            if info is None:
                fresh = fresh or pid not in listed
                continue
            if pid in killed:
                if info[0] == "Z" or ours(pid, info):
                    busy = True
                    continue
                killed.discard(pid)  # reaped, and the pid reused by another process
            if pid in stopped:
                busy = True
            elif info[0] in ("Z", "X"):
                # Dead but charged to the pids limit until reaped: wait for ours to go.
                busy = busy or info[1] in stopped or info[1] in killed or ours(pid, info)
            elif ours(pid, info):
                busy = fresh = True
                if now < spare_until and info[0] in ("R", "D") and cpu_ns(pid) < SPARE_CPU_NS:
                    continue
                signal_quietly(pid, signal.SIGSTOP)
                stopped.add(pid)
        listed = current
        if not fresh and stopped:  # nothing of ours can fork any more: kill them all
            for pid in stopped:
                signal_quietly(pid, signal.SIGKILL)
            killed |= stopped
            stopped = set()
            continue
        if not busy and not fresh:
            return True
        if now >= end:
            for pid in stopped:  # never leave processes stopped behind
                signal_quietly(pid, signal.SIGKILL)
            return False
        time.sleep(0.002)


class HeadTail:
    """The first cap - cap//2 and the last cap//2 bytes of a stream, and its true size, as
    hosts.backends.base.HeadTailBuffer keeps them (the client rebuilds one from these)."""

    def __init__(self, cap: int) -> None:
        self.head_cap, self.tail_cap = cap - cap // 2, cap // 2
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            if len(self.tail) > self.tail_cap:
                # Deleting from the front of a bytearray is amortized O(1) in CPython.
                del self.tail[: len(self.tail) - self.tail_cap]


def exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + the killing signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)
