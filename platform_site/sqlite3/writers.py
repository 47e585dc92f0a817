"""The writers' queue of one SQLite database: whose turn it is to write, over threads and
processes (base.py takes a turn for each transaction and each lone write statement).

SQLite has one writer at a time. One that finds the database locked retries only after
sleeps that grow to 100 ms (its busy handler), so when 50 threads of three processes wanted
to write at once (50 create_sandbox calls) the lock went to whichever retried right after it
was freed, and a writer that had already waited kept losing: bench/bench_lifecycle.py saw a
rate-limit count, two short transactions, wait 2.4 s.

A turn is two locks, taken in order and held until the transaction ends:
- the process's own (a threading.Lock): its threads wait on it, and the one releasing it
  hands it over at once;
- the database's lock file (`<database>-writers`, flock), for the turn between processes.
  Only the thread holding the process's lock asks for it, so at most one thread a process
  polls it, every 0.5 to 4 ms, far tighter than SQLite's handler and cheap for so few.
Then SQLite's own lock is free whenever a turn begins, but for writers outside the queue (a
sqlite3 shell, say), which SQLite's handler still waits for. A turn not had within the
connection's `timeout` fails as SQLite would: "database is locked".
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time

FIRST_POLL = 0.0005  # seconds between two looks at the lock file at first
LAST_POLL = 0.004  # and at most


class Queue:
    """One database's queue in this process."""

    def __init__(self, name: str) -> None:
        self.lock = threading.Lock()
        self.path = f"{name}-writers" if _on_disk(name) else ""
        self._fd: int | None = None

    def take(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        if not self.lock.acquire(timeout=timeout):
            raise sqlite3.OperationalError("database is locked")
        try:
            self._take_file(deadline)
        except BaseException:
            self.lock.release()
            raise

    def give(self) -> None:
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self.lock.release()

    def _take_file(self, deadline: float) -> None:
        if not self.path:
            return
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        pause = FIRST_POLL
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise sqlite3.OperationalError("database is locked") from None
                time.sleep(pause)
                pause = min(pause * 2, LAST_POLL)

    def forget(self) -> None:
        """In a forked child: the parent's lock file stays the parent's (closing this copy of
        its descriptor leaves the parent's lock alone)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _on_disk(name: str) -> bool:
    return bool(name) and name != ":memory:" and "mode=memory" not in name


_queues: dict[str, Queue] = {}
_queues_lock = threading.Lock()


def queue(name: str) -> Queue:
    """This process's queue for the database file `name`."""
    with _queues_lock:
        found = _queues.get(name)
        if found is None:
            found = _queues[name] = Queue(name)
        return found


def _after_fork_in_child() -> None:
    # A forked child (a django-q2 worker) may inherit a queue some other thread of its
    # parent held at the fork: it starts with queues of its own.
    global _queues_lock
    _queues_lock = threading.Lock()
    for old in _queues.values():
        old.forget()
    _queues.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Turn:
    """One connection's turn in its database's queue (held or not)."""

    def __init__(self, name: str, timeout: float) -> None:
        self.name = str(name)
        self.timeout = timeout
        self.held: Queue | None = None

    def take(self) -> None:
        if self.held is not None:
            return
        found = queue(self.name)  # looked up each time: a forked child has its own
        found.take(self.timeout)
        self.held = found

    def give(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            held.give()
