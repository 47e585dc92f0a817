"""Deleting a sandbox without waiting for its host (run_once): the row is deleted at once,
the host's removal of the container, its volume and disk (~70 ms of engine work on Docker)
runs on a small pool of this process's threads after the caller has its answer.

Nothing is lost if that removal fails or the process dies first: the container then belongs
to a deleted sandbox, an orphan that reconciliation removes (hosts are listed every few
minutes). The threads touch the host only, never the database.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from typing import Any

from hosts.backends.base import SandboxBackend, SandboxGone
from sandboxes.contract.errors import Conflict
from sandboxes.contract.results import SandboxInfo
from sandboxes.models import CHANGING_STATUSES, Sandbox, SandboxStatus
from sandboxes.policy import access
from sandboxes.policy.access import WRITE
from sandboxes.services.common import backend_of
from tenants.principal import Principal

logger = logging.getLogger(__name__)

REMOVED_LATER = "deleted; its container is removed in the background"

_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandhub-removal")
_pending: set[Future[None]] = set()
_lock = threading.Lock()


def delete_soon(principal: Principal, sandbox_id: str) -> SandboxInfo:
    """Delete the sandbox now and remove what it holds on its host right after."""
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "delete sandboxes")
    state = dict(sandbox.backend_state)
    backend = backend_of(sandbox) if sandbox.host and state else None
    if sandbox.status in CHANGING_STATUSES:
        raise Conflict(f"sandbox {sandbox_id} is {sandbox.status} right now; try again")
    seen = sandbox.status
    if seen != SandboxStatus.PENDING:
        sandbox.transition(SandboxStatus.STOPPING)
    sandbox.transition(SandboxStatus.DELETED, REMOVED_LATER if backend else "")
    # Compare-and-set on the status it was read in: a pause or stop that got there first
    # keeps its claim, and this changes nothing.
    fields = ("status", "status_message", "status_changed_at", "deleted_at")
    won = Sandbox.objects.filter(pk=sandbox.pk, status=seen).update(
        **{name: getattr(sandbox, name) for name in fields}
    )
    if not won:
        raise Conflict(f"sandbox {sandbox_id} changed meanwhile; try again")
    if backend is not None:
        future = _pool.submit(_remove, backend, state, sandbox.public_id)
        with _lock:
            _pending.add(future)
        future.add_done_callback(_forget)
    return SandboxInfo.from_model(sandbox)


def _remove(backend: SandboxBackend, state: dict[str, Any], public_id: str) -> None:
    try:
        backend.destroy(state)
    except SandboxGone:
        pass  # gone already: what removing it was for
    except Exception:
        logger.warning(
            "could not remove what deleted sandbox %s held on its host; reconciliation will",
            public_id,
            exc_info=True,
        )


def _forget(future: Future[None]) -> None:
    with _lock:
        _pending.discard(future)


def wait_for_removals(timeout: float = 60.0) -> bool:
    """Wait until every removal started so far is done (tests, and a clean shutdown)."""
    with _lock:
        pending = list(_pending)
    done, not_done = wait_all(pending, timeout=timeout)
    return not not_done
