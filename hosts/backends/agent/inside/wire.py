"""Frames, requests in flight, worker threads and the reaper (part 1 of the agent).

The protocol's constants come from constants.py, the one copy both ends use (protocol.py
documents them).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import struct
import subprocess
import threading
import time
from typing import Any

from .constants import (
    CHUNK,
    CREDIT,
    DATA,
    ERR_EXISTS,
    ERR_INTERNAL,
    ERR_INVALID,
    ERR_NOT_A_DIRECTORY,
    ERR_NOT_FOUND,
    ERR_PERMISSION,
    ERR_SPAWN,
    HEADER,
)
from .oom import oom_first

SPAWN_PATIENCE = 2.0  # seconds to retry a fork refused for want of pids or memory
IDLE_WORKERS = 4  # kept alive, so requests are served even when no new thread can be made
# errno of a fork or pipe refused for want of resources: EAGAIN, ENOMEM, ENFILE, EMFILE.
_NO_RESOURCES = (11, 12, 23, 24)
_ERRNO_KINDS = {1: ERR_PERMISSION, 2: ERR_NOT_FOUND, 13: ERR_PERMISSION, 17: ERR_EXISTS}
_ERRNO_KINDS.update({20: ERR_NOT_A_DIRECTORY, 21: ERR_EXISTS, 40: ERR_NOT_A_DIRECTORY})


class Refusal(Exception):
    """A request that cannot be done, said to the client as an ERROR frame of this kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def refusal(exc: OSError, what: str) -> Refusal:
    kind = _ERRNO_KINDS.get(exc.errno or 0, ERR_INTERNAL)
    return Refusal(kind, f"{what}: {exc.strerror or exc}")


class Wire:
    """Frames out on the agent's private stdout, one writer at a time.

    A slow reader on the platform's side blocks the writers, and so the commands whose output
    waits to be sent: that is the flow control of the agent-to-platform direction.
    """

    def __init__(self, fd: int) -> None:
        self.fd, self.lock = fd, threading.Lock()

    def send(self, packets: list[bytes]) -> None:
        blob = memoryview(b"".join(packets))
        with self.lock:
            while blob:
                blob = blob[os.write(self.fd, blob) :]

    @staticmethod
    def packet(rid: int, kind: int, payload: bytes = b"") -> bytes:
        return HEADER.pack(len(payload), rid, kind) + payload

    def data(self, rid: int, channel: int, chunk: bytes) -> list[bytes]:
        tag = bytes((channel,))
        pieces = range(0, len(chunk), CHUNK)
        return [self.packet(rid, DATA, tag + chunk[at : at + CHUNK]) for at in pieces]

    def control(self, rid: int, kind: int, body: dict[str, Any]) -> bytes:
        return self.packet(rid, kind, json.dumps(body, separators=(",", ":")).encode())


class Request:
    """One request in flight: arguments, inbound data, cancellation, and a way to wake it."""

    def __init__(self, wire: Wire, rid: int, args: dict[str, Any]) -> None:
        self.wire, self.rid, self.args = wire, rid, args
        self.cond = threading.Condition()
        self.inbound: collections.deque[bytes] = collections.deque()
        self.eof = self.cancelled = False
        self.acked = 0  # outbound bytes the client took (ACK): a port stream's window
        self.wake_fd = -1  # the write end of an exec loop's wake-up pipe
        self.outbox: list[bytes] = []  # frames sent together with the RESULT

    def poke(self) -> None:
        with self.cond:
            self.cond.notify_all()
            if self.wake_fd >= 0:
                with contextlib.suppress(OSError):  # full: it is awake already
                    os.write(self.wake_fd, b"!")

    def push(self, chunk: bytes) -> None:
        with self.cond:
            self.inbound.append(chunk)
        self.poke()

    def end_input(self) -> None:
        with self.cond:
            self.eof = True
        self.poke()

    def cancel(self) -> None:
        self.cancelled = True
        self.poke()

    def ack(self, count: int) -> None:
        with self.cond:
            self.acked += count
        self.poke()

    def take(self) -> bytes | None:
        """The next inbound chunk (credited back to the client); None at the end of input."""
        with self.cond:
            while not self.inbound and not self.eof and not self.cancelled:
                self.cond.wait()
            if self.cancelled:
                raise Refusal(ERR_INVALID, "cancelled")
            chunk = self.inbound.popleft() if self.inbound else None
        if chunk:
            self.credit(len(chunk))
        return chunk

    def credit(self, count: int) -> None:
        self.wire.send([Wire.packet(self.rid, CREDIT, struct.pack("!I", count))])


class Reaper:
    """Collects the exit status of every child: our own, and the orphans handed to us."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting: dict[int, tuple[subprocess.Popen, Any]] = {}
        self.spawned = threading.Event()

    def spawn(self, on_exit: Any, argv: list[str], **options: Any) -> subprocess.Popen:
        """Popen, retried for a while when fork fails for want of pids or memory.

        Spawns are serialized, so the pipes of one are never open in the agent while another
        forks (its child would hold them, and the first command's output would never end);
        the lock also keeps the reaper from taking a child before it is registered.
        """
        give_up = time.monotonic() + SPAWN_PATIENCE
        argv, options = oom_first(argv, options)
        while True:
            try:
                with self.lock:
                    child = subprocess.Popen(argv, **options)
                    self.waiting[child.pid] = (child, on_exit)
                self.spawned.set()
                return child
            except OSError as exc:
                # An exec that failed names its file; a fork that failed names none.
                if exc.filename is not None or exc.errno not in _NO_RESOURCES:
                    raise
                if time.monotonic() > give_up:
                    message = (
                        "no new process could be created in the sandbox (its process or "
                        f"memory limit is used up): {exc.strerror}"
                    )
                    raise Refusal(ERR_SPAWN, message) from None
                time.sleep(0.02)

    def run(self) -> None:
        while True:
            self.spawned.clear()
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                # No children at all: orphans only come from children, so wait for a spawn.
                self.spawned.wait(5.0)
                continue
            with self.lock:
                child, on_exit = self.waiting.pop(pid, (None, None))
            if child is not None:
                # Popen learns it is over, so it never waits for the pid (or warns about it).
                child.returncode = status
                if on_exit is not None:
                    on_exit(status)


class Pool:
    """Worker threads; a request waits in the queue when no new thread can be made."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.tasks: collections.deque[Any] = collections.deque()
        self.idle = self.threads = 0
        for _ in range(IDLE_WORKERS):
            self.grow()

    def submit(self, task: Any) -> None:
        with self.cond:
            self.tasks.append(task)
            self.cond.notify()
            if self.idle >= len(self.tasks):
                return
        self.grow()

    def grow(self) -> None:
        with self.cond:
            self.threads += 1
        try:
            threading.Thread(target=self.work, daemon=True).start()
        except RuntimeError:  # can't start new thread (pids limit): a busy worker takes it
            with self.cond:
                self.threads -= 1

    def work(self) -> None:
        while True:
            with self.cond:
                self.idle += 1
                while not self.tasks:
                    idle = not self.cond.wait(30.0)
                    if idle and self.threads > IDLE_WORKERS and not self.tasks:
                        self.idle -= 1
                        self.threads -= 1
                        return
                self.idle -= 1
                task = self.tasks.popleft()
            task()
