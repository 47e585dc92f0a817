"""Agents kept running in the warm pool's ready members, by each web process for itself.

A sandbox agent belongs to one platform process: its stream is that process's connection
(hosts/backends/agent/link.py), and starting one costs an engine exec, a python3 start and a
handshake (~150 ms, and the engine serializes execs: 50 at once took ~3 s). A member claimed
in one web process may get its first command in another (uvicorn's workers share the port),
and the worker that makes members serves no commands. So every web process keeps, in the
background, an agent of its own in each ready member of the pool (at most
SANDHUB_POOL_AGENTS of them): whichever process claims a member, and whichever serves the
sandbox's first command, finds that member's agent already running there.

- A member claimed by anyone: the agent simply stays, as the sandbox's agent in this process
  (as if it had served a command here); it ends with the sandbox's container.
- A member gone unclaimed (trimmed, discarded, found stale): its agent is closed here.
- A claim prefers a member whose agent runs in the claiming process (`warmed`), so a member
  made a moment ago, before this process took it up, goes last; and the claim needs no
  inspection of the container (its agent's open stream shows it runs: docker/pool.py).
- New members' agents wait until the process has claimed nothing for QUIET_AFTER_CLAIM: in a
  burst of creates the CPU goes to the creates and their first commands (whose members'
  agents run already), and the refilled members are taken up right after.

Cost, measured (bench/bench_lifecycle.py, the sandbox image): each agent is a python3
process in the member (counted in the sandbox's memory like its own processes) and, in the
web process, one stream and one reader thread (bench/bench_idle_agents.py: ~0.3 MB each).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from hosts.backends import get_backend
from hosts.backends.base import BackendError, SandboxBackend
from sandboxes.models import WarmContainer, WarmContainerStatus

logger = logging.getLogger(__name__)

LOOK_EVERY = 0.5  # seconds between two looks at the pool
STARTS_AT_ONCE = 2  # agents one process starts at the same time (each holds an engine exec)
# New members' agents wait until this process has claimed nothing for this long: a burst of
# creates gets the CPU (an agent's start is an engine exec and a python3 start, ~40 ms of CPU)
# while it claims members whose agents run already.
QUIET_AFTER_CLAIM = 1.0


@dataclass
class _Kept:
    backend: SandboxBackend
    state: dict[str, Any]
    running: bool  # False: it could not start there (no python3, the agent off)


class PoolAgents:
    """This process's agents in ready warm-pool members."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.last_claim = 0.0  # time.monotonic() of this process's last claim
        self._kept: dict[str, _Kept] = {}  # pool id -> its agent here
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def warmed(self) -> frozenset[str]:
        """Pool ids of the members whose agent runs in this process."""
        with self._lock:
            return frozenset(
                pool_id
                for pool_id, kept in self._kept.items()
                if kept.running and kept.backend.has_agent(kept.state)
            )

    def look(self) -> None:
        """One look at the pool: an agent for each new ready member (up to the limit), none
        kept for a member gone unclaimed."""
        statuses = dict(WarmContainer.objects.values_list("pool_id", "status"))
        with self._lock:
            gone = [p for p in self._kept if statuses.get(p) != WarmContainerStatus.READY]
            left = {pool_id: self._kept.pop(pool_id) for pool_id in gone}
            room = self.limit - len(self._kept)
            new = [
                pool_id
                for pool_id, status in statuses.items()
                if status == WarmContainerStatus.READY and pool_id not in self._kept
            ]
        for pool_id, kept in left.items():
            if pool_id not in statuses:  # its container is going: nothing will use the agent
                kept.backend.drop_agent(kept.state)
        quiet = time.monotonic() - self.last_claim >= QUIET_AFTER_CLAIM
        if new and room > 0 and quiet:
            self._start(new[:room])

    def _start(self, pool_ids: list[str]) -> None:
        members = WarmContainer.objects.filter(
            pool_id__in=pool_ids, status=WarmContainerStatus.READY
        ).select_related("host")
        work = [
            (member.pool_id, get_backend(member.host), member.backend_state)
            for member in members
            if member.host.healthy and member.host.kind in settings.SANDHUB_BACKENDS
        ]
        with ThreadPoolExecutor(STARTS_AT_ONCE, thread_name_prefix="sandhub-pool-agent") as pool:
            for pool_id, backend, state, running in pool.map(lambda w: (*w, _keep(*w)), work):
                if running is None:
                    continue  # tried again on the next look
                with self._lock:
                    self._kept[pool_id] = _Kept(backend, state, running)

    # --- the background thread -----------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="sandhub-pool-agents", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            close_old_connections()  # a thread, not a request: nobody else closes them
            try:
                self.look()
            except Exception:  # a look fails (the database busy, say): the next one retries
                logger.warning("keeping agents in warm-pool members", exc_info=True)
            finally:
                close_old_connections()
            self._stop.wait(LOOK_EVERY)


def _keep(pool_id: str, backend: SandboxBackend, state: dict[str, Any]) -> bool | None:
    """Whether the member's agent runs here now; None: try again later."""
    try:
        return backend.keep_agent(state)
    except BackendError as exc:  # gone or claimed and deleted meanwhile, the engine busy
        logger.info("no agent kept in warm-pool member %s yet: %s", pool_id, exc)
        return None


# The web process's keeper (platform_site/asgi.py starts it with the server); None elsewhere.
_keeper: PoolAgents | None = None


def start() -> None:
    """Keep agents in the pool's members from now on, in this process (a web process)."""
    global _keeper
    if settings.SANDHUB_POOL_AGENTS <= 0 or not settings.SANDHUB_AGENT:
        return
    if _keeper is None:
        _keeper = PoolAgents(settings.SANDHUB_POOL_AGENTS)
    _keeper.start()


def stop() -> None:
    if _keeper is not None:
        _keeper.stop()


def claimed() -> None:
    """This process claimed a member just now (the keeper holds off new starts a moment)."""
    if _keeper is not None:
        _keeper.last_claim = time.monotonic()


def warmed() -> frozenset[str]:
    """Pool ids of the members whose agent runs in this process (none outside web processes)."""
    return _keeper.warmed() if _keeper is not None else frozenset()
