"""Warm pool: per host and image, a few started containers waiting to become sandboxes, so
creating a sandbox does not wait for a container to start.

- Size: `Image.warm_pool_size` ready members per eligible host (enabled, not draining,
  healthy). An image whose size is 0 (the model default, "unset") gets
  SANDHUB_WARM_POOL_SIZE, a Django setting or environment variable that defaults to 0: no
  pool unless asked for.
- Members are WarmContainer rows (sandboxes.models). A member is reserved in the database
  (status provisioning, a slot unique per host and image) before its container is made, and
  claimed with a conditional UPDATE (SELECT ... FOR UPDATE SKIP LOCKED first on PostgreSQL),
  so two processes can neither overfill a pool nor claim the same member.
- `provision_sandbox` (called by create_sandbox) claims a member when the sandbox fits one:
  same host and image, and no network (members are created without network; network mode
  cannot change later). The backend applies the sandbox's limits to the running
  container; if it cannot, the member is discarded and the sandbox provisioned afresh. Env is
  passed on every exec, so nothing of the sandbox's is baked into the member.
- Members are not Sandbox rows: they never count against a team's quota and never appear in
  list_sandboxes. After a claim the row stays (status claimed, sandbox set): it is the record
  that ties the container's immutable pool-id label to the sandbox, which reconciliation
  reads; it is pruned once the sandbox is deleted.
- Refill (poolfill.py): asked for after every claim, at once, a few members at a time per
  host; and a schedule every minute. Members of draining or disabled hosts, and members
  beyond the pool size, are removed; anything that leaks (a worker dying mid-provision) is
  an orphan for reconciliation.
- Agents (poolagents.py): each web process keeps one running in every ready member, so a
  claimed sandbox's first command starts none, and a claim prefers such a member.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from django.db import transaction
from django.db.models import Case, Value, When
from django.utils import timezone

from hosts.backends import get_backend
from hosts.backends.base import BackendError, SandboxSpec
from sandboxes.housekeeping import poolagents, poolfill
from sandboxes.housekeeping.config import instance_labels
from sandboxes.housekeeping.poolfill import RefillReport, discard, pool_size, refill
from sandboxes.models import Sandbox, WarmContainer, WarmContainerStatus
from sandboxes.policy import limits
from tenants.auditing import current

__all__ = ["RefillReport", "discard", "pool_size", "provision_sandbox", "queue_refill", "refill"]

logger = logging.getLogger(__name__)

READY = WarmContainerStatus.READY
_CLAIM_ATTEMPTS = 3


# --- claiming ---------------------------------------------------------------------------------


def take_member(sandbox: Sandbox) -> WarmContainer | None:
    """A ready member claimed for the new sandbox if one fits it, in the caller's transaction
    (the one that creates the sandbox's row); None if none does."""
    # Members are made without network and with the default disk (neither changes later).
    if sandbox.network or sandbox.disk_mb not in (None, limits.DEFAULT_DISK_MB):
        return None
    member = _take(sandbox)
    if member is not None:
        queue_refill()
        poolagents.claimed()
    return member


def provision_sandbox(
    sandbox: Sandbox, spec: SandboxSpec, member: WarmContainer | None = None
) -> dict[str, Any]:
    """The backend state of the new sandbox: the member claimed for it made into it (see
    take_member), else a fresh one."""
    spec = replace(spec, labels={**spec.labels, **instance_labels()})
    assert sandbox.host is not None, "placement gives every new sandbox a host"
    backend = get_backend(sandbox.host)
    if member is not None:
        try:
            state = backend.claim_pool_member(member.backend_state, spec)
        except BackendError as exc:
            logger.warning("warm member %s unusable, provisioning afresh: %s", member.pool_id, exc)
            discard(member, backend)
        else:
            current().details["warm_pool"] = member.pool_id
            return state
    return backend.provision(spec)


def _take(sandbox: Sandbox) -> WarmContainer | None:
    """A ready member of the sandbox's host and image, now claimed for it; None if none."""
    for _ in range(_CLAIM_ATTEMPTS):
        with transaction.atomic():
            # PostgreSQL: concurrent claimers skip each other's rows instead of queueing on
            # them. SQLite ignores FOR UPDATE; the conditional UPDATE below decides there.
            candidate = (
                WarmContainer.objects.select_for_update(skip_locked=True)
                .filter(host=sandbox.host, image=sandbox.image, status=READY)
                .order_by(*_agent_here_first(), "slot")
                .first()
            )
            if candidate is None:
                return None
            won = WarmContainer.objects.filter(pk=candidate.pk, status=READY).update(
                status=WarmContainerStatus.CLAIMED,
                slot=None,
                sandbox=sandbox,
                claimed_at=timezone.now(),
            )
        if won:
            candidate.status, candidate.slot, candidate.sandbox = (
                WarmContainerStatus.CLAIMED,
                None,
                sandbox,
            )
            return candidate
    return None


def _agent_here_first() -> list[Case]:
    """Members whose agent runs in this process first (poolagents.py): the sandbox's first
    command then starts none, wherever it is served."""
    warmed = poolagents.warmed()
    if not warmed:
        return []
    return [Case(When(pool_id__in=warmed, then=Value(0)), default=Value(1))]


def queue_refill() -> None:
    """Ask for a refill once the claim commits (poolfill.py)."""
    poolfill.queue_refill()
