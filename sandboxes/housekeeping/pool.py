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
- Refill: a task queued when a member is claimed (on commit) and a schedule every minute.
  Members of draining or disabled hosts, and members beyond the pool size, are removed;
  anything that leaks (a worker dying mid-provision) is an orphan for reconciliation.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from hosts.backends import get_backend
from hosts.backends.base import BackendError, SandboxBackend, SandboxSpec, Unsupported
from hosts.models import Host, Image
from sandboxes.housekeeping.config import default_pool_size, instance_labels
from sandboxes.models import Sandbox, WarmContainer, WarmContainerStatus
from sandboxes.policy import limits
from tenants.auditing import current

logger = logging.getLogger(__name__)

READY = WarmContainerStatus.READY
# A member still provisioning after this long belongs to a worker that died.
STALE_PROVISIONING = timedelta(minutes=10)
_CLAIM_ATTEMPTS = 3


def pool_size(image: Image) -> int:
    return image.warm_pool_size or default_pool_size()


# --- claiming ---------------------------------------------------------------------------------


def provision_sandbox(sandbox: Sandbox, spec: SandboxSpec) -> dict[str, Any]:
    """The backend state of the new sandbox: a claimed pool member if one fits, else fresh."""
    spec = replace(spec, labels={**spec.labels, **instance_labels()})
    assert sandbox.host is not None, "placement gives every new sandbox a host"
    backend = get_backend(sandbox.host)
    # Members are made without network and with the default disk (neither changes later).
    if not spec.network and spec.disk_mb in (None, limits.DEFAULT_DISK_MB):
        state = _claim(sandbox, spec, backend)
        if state is not None:
            return state
    return backend.provision(spec)


def _claim(sandbox: Sandbox, spec: SandboxSpec, backend: SandboxBackend) -> dict[str, Any] | None:
    member = _take(sandbox)
    if member is None:
        return None
    queue_refill()
    try:
        state = backend.claim_pool_member(member.backend_state, spec)
    except BackendError as exc:
        logger.warning("warm container %s unusable, provisioning afresh: %s", member.pool_id, exc)
        discard(member, backend)
        return None
    current().details["warm_pool"] = member.pool_id
    return state


def _take(sandbox: Sandbox) -> WarmContainer | None:
    """A ready member of the sandbox's host and image, now claimed for it; None if none."""
    for _ in range(_CLAIM_ATTEMPTS):
        with transaction.atomic():
            # PostgreSQL: concurrent claimers skip each other's rows instead of queueing on
            # them. SQLite ignores FOR UPDATE; the conditional UPDATE below decides there.
            candidate = (
                WarmContainer.objects.select_for_update(skip_locked=True)
                .filter(host=sandbox.host, image=sandbox.image, status=READY)
                .order_by("slot")
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
            candidate.refresh_from_db()
            return candidate
    return None


def discard(member: WarmContainer, backend: SandboxBackend) -> None:
    """Remove a member's container and row; if the host refuses, reconciliation removes it."""
    with contextlib.suppress(BackendError):
        backend.destroy(member.backend_state or {"sandbox_id": member.pool_id})
    WarmContainer.objects.filter(pk=member.pk).delete()


def queue_refill() -> None:
    """Ask a worker to refill the pools once the current transaction commits."""

    def enqueue() -> None:
        try:
            from django_q.tasks import async_task

            async_task("sandboxes.tasks.refill_pools", task_name="refill warm pools")
        except Exception:  # the schedule refills anyway; a claim must not fail for this
            logger.warning("could not queue a warm-pool refill", exc_info=True)

    transaction.on_commit(enqueue)


# --- refilling --------------------------------------------------------------------------------


@dataclass
class RefillReport:
    started: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def refill(hosts: list[Host] | None = None) -> RefillReport:
    """Bring every pool to its size: start missing members, remove surplus and unwanted ones.

    Hosts that do not answer are left alone (their members are cleaned up when they answer).
    """
    report = RefillReport()
    _drop_stale_provisioning(report)
    images = list(Image.objects.all())
    if hosts is None:
        hosts = list(Host.objects.filter(kind__in=list(settings.SANDHUB_BACKENDS)))
    for host in hosts:
        if not host.healthy:
            continue
        wanted = host.enabled and not host.draining
        for image in images:
            size = pool_size(image) if wanted else 0
            _trim(host, image, size, report)
            if size and not _fill(host, image, size, report):
                break  # the host has no pool, or refuses: try again on the next run
    return report


def _trim(host: Host, image: Image, size: int, report: RefillReport) -> None:
    surplus = WarmContainer.objects.filter(host=host, image=image, status=READY, slot__gte=size)
    for member in surplus:
        # Deleting only if still ready: a member claimed meanwhile is someone's sandbox now.
        if WarmContainer.objects.filter(pk=member.pk, status=READY).delete()[0]:
            with contextlib.suppress(BackendError):
                get_backend(host).destroy(member.backend_state)
            report.removed.append(member.pool_id)


def _fill(host: Host, image: Image, size: int, report: RefillReport) -> bool:
    """Start members for the free slots; False when the host cannot have a pool right now."""
    taken = set(
        WarmContainer.objects.filter(host=host, image=image, slot__isnull=False).values_list(
            "slot", flat=True
        )
    )
    for slot in range(size):
        if slot in taken:
            continue
        member = _reserve(host, image, slot)
        if member is None:
            continue  # another refill took the slot
        try:
            state = get_backend(host).provision_pool_member(_member_spec(member, image))
        except Unsupported:
            member.delete()
            return False
        except BackendError as exc:
            member.delete()
            report.errors.append(f"{host.name}/{image.name}: {exc}")
            logger.warning("warm pool of %s on %s: %s", image, host, exc)
            return False
        ready = WarmContainer.objects.filter(
            pk=member.pk, status=WarmContainerStatus.PROVISIONING
        ).update(status=READY, backend_state=state, ready_at=timezone.now())
        if not ready:  # the row was dropped as stale meanwhile: do not leak the container
            with contextlib.suppress(BackendError):
                get_backend(host).destroy(state)
            continue
        report.started.append(member.pool_id)
    return True


def _reserve(host: Host, image: Image, slot: int) -> WarmContainer | None:
    try:
        with transaction.atomic():
            return WarmContainer.objects.create(host=host, image=image, slot=slot)
    except IntegrityError:
        return None


def _member_spec(member: WarmContainer, image: Image) -> SandboxSpec:
    # Sized as a default sandbox, so claiming for one changes no limit.
    return SandboxSpec(
        sandbox_id=member.pool_id,
        image_reference=image.reference,
        cpus=limits.DEFAULT_CPUS,
        memory_mb=limits.DEFAULT_MEMORY_MB,
        pids_limit=limits.DEFAULT_PIDS_LIMIT,
        disk_mb=limits.DEFAULT_DISK_MB,
        network=False,
        env={},
        labels=instance_labels(),
    )


def _drop_stale_provisioning(report: RefillReport) -> None:
    stale = WarmContainer.objects.filter(
        status=WarmContainerStatus.PROVISIONING,
        created_at__lt=timezone.now() - STALE_PROVISIONING,
    ).select_related("host")
    for member in stale:
        if member.host.healthy:
            discard(member, get_backend(member.host))
        else:
            member.delete()  # its container, if any, is an orphan for reconciliation
        report.removed.append(member.pool_id)
