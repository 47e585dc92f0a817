"""One thread per process that runs callbacks at deadlines (closing a stuck channel).

Some paramiko calls wait without a timeout (`Channel.exec_command` waits for the server's
reply forever): a server that stops answering while its TCP connection stays up would hang
the caller. Closing the channel from another thread wakes such a wait, so every call that
could block gets a deadline here. One shared thread instead of a `threading.Timer` per call
keeps the cost of a deadline to a heap push (a command takes ~2 ms; a thread start is ~0.1).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import Callable


class Deadline:
    """A scheduled callback; `cancel()` before it fires and it never runs."""

    __slots__ = ("cancelled", "fired", "_callback", "_owner")

    def __init__(self, callback: Callable[[], None], owner: Watchdog) -> None:
        self._callback = callback
        self._owner = owner
        self.cancelled = False
        self.fired = False

    def cancel(self) -> None:
        if not self.cancelled and not self.fired:
            self.cancelled = True
            self._owner._forget_one()

    def _fire(self) -> None:
        if self.cancelled:
            return
        self.fired = True
        # A failing callback (closing a channel already gone) must not stop the watchdog.
        with contextlib.suppress(Exception):
            self._callback()


class Watchdog:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None
        self._cancelled = 0

    def schedule(self, seconds: float, callback: Callable[[], None]) -> Deadline:
        """Run `callback` in the watchdog thread after `seconds` unless cancelled first."""
        deadline = Deadline(callback, self)
        entry = (time.monotonic() + seconds, next(self._order), deadline)
        with self._wakeup:
            heapq.heappush(self._heap, entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="sandhub-ssh-watchdog", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is deadline:
                self._wakeup.notify()  # an earlier deadline than the one being waited for
        return deadline

    def _forget_one(self) -> None:
        # Most deadlines are cancelled (the command finished) long before they are due: drop
        # them once they are most of the heap, so thousands of short commands with long
        # timeouts do not pile up.
        with self._wakeup:
            self._cancelled += 1
            if self._cancelled > 256 and self._cancelled * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def _loop(self) -> None:
        while True:
            with self._wakeup:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    if self._heap:
                        # Cancelled entries at the top are dropped without waiting for them.
                        if self._heap[0][2].cancelled:
                            heapq.heappop(self._heap)
                            self._cancelled = max(0, self._cancelled - 1)
                            continue
                        self._wakeup.wait(self._heap[0][0] - time.monotonic())
                    else:
                        self._wakeup.wait()
                _, _, due = heapq.heappop(self._heap)
            due._fire()


watchdog = Watchdog()
