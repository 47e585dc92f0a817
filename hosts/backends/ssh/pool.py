"""One SSH connection per target per process, checked before reuse and remade when broken.

    conn = pool.get(target)     # the shared connection, connecting on first use
    conn.run("uptime", timeout=5)

`get` is cheap on the hot path (a dict lookup and `is_active()`); a connection idle for more
than `check_after` seconds is first proven alive with a round trip, so a host that rebooted
or dropped us while idle costs a reconnect, not a failed command. Connecting happens outside
the pool's lock: a slow host delays only the callers that want that host.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

from hosts.backends.ssh.connection import SshConnection, SshTarget
from hosts.backends.ssh.errors import SshError


class _Slot:
    """A target's place in the pool: its lock serialises (re)connecting to that target."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connection: SshConnection | None = None


class ConnectionPool:
    def __init__(
        self,
        *,
        connect_timeout: float = 10.0,
        keepalive: int = 15,
        check_after: float = 30.0,
        check_timeout: float = 5.0,
        max_sessions: int = 8,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.check_after = check_after  # idle seconds after which `get` pings before reuse
        self.check_timeout = check_timeout
        self.max_sessions = max_sessions  # run() calls at once per connection (connection.py)
        self._slots: dict[SshTarget, _Slot] = {}
        self._lock = threading.Lock()
        # A forked child (a worker process) shares its parent's sockets: using or closing
        # them would corrupt the parent's sessions. The child starts with an empty pool.
        this = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forget_after_fork(this))

    def get(self, target: SshTarget) -> SshConnection:
        """The live connection to `target`, made or remade as needed (raises SshError)."""
        with self._lock:
            slot = self._slots.setdefault(target, _Slot())
        with slot.lock:
            connection = slot.connection
            if connection is not None and self._healthy(connection):
                return connection
            if connection is not None:
                connection.close()
                slot.connection = None
            slot.connection = SshConnection(
                target,
                connect_timeout=self.connect_timeout,
                keepalive=self.keepalive,
                max_sessions=self.max_sessions,
            )
            return slot.connection

    def drop(self, target: SshTarget) -> None:
        """Close and forget `target`'s connection (a host deleted, its credential replaced)."""
        with self._lock:
            slot = self._slots.pop(target, None)
        if slot is not None:
            with slot.lock:
                if slot.connection is not None:
                    slot.connection.close()
                    slot.connection = None

    def close_all(self) -> None:
        with self._lock:
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            with slot.lock:
                if slot.connection is not None:
                    slot.connection.close()
                    slot.connection = None

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for slot in self._slots.values() if slot.connection is not None)

    def _healthy(self, connection: SshConnection) -> bool:
        if not connection.is_alive():
            return False
        if time.monotonic() - connection.last_used < self.check_after:
            return True
        try:
            connection.ping(timeout=self.check_timeout)
        except SshError:
            return False
        return True


def _forget_after_fork(ref: weakref.ref[ConnectionPool]) -> None:
    pool = ref()
    if pool is not None:
        pool._slots = {}
        pool._lock = threading.Lock()  # it may have been held by another thread at fork


# The process's pool, used by the SSH backend.
pool = ConnectionPool()
