"""Refilling the warm pool (pool.py claims from it): members started as soon as others are
claimed, several at a time, never more than SANDHUB_POOL_STARTS_PER_HOST per host at once.

- Asked for after every claim: the claiming process asks its own requester thread, which
  queues the django-q2 task `refill_pools` (sandboxes/tasks.py) at most once per
  REQUEST_GAP seconds however many claims asked meanwhile (a burst of 50 claims queues a few
  tasks, not 50 rows in the queue's table, and none in the claim's own request), and always
  once after the last ask: a refill that began before a claim may miss that claim's slot,
  the one queued after it does not. It waits for a lull (claims paused QUIET seconds and no
  call being served in the process, at most MAX_DEFERRAL). With the ORM broker a queued
  task starts within the broker's poll (0.2 s) when a worker is free. The one-minute
  schedule remains, for what nothing asked for (a host back from the dead, a pool grown in
  admin).
- Each member is a slot reserved in the database before its container is made (a
  provisioning row, its slot unique per host and image). The reservation counts the host's
  provisioning rows in the same transaction, on PostgreSQL after locking the host's row
  (SQLite's transactions take the write lock when they begin), so every worker and process
  together start at most the bound at once on a host; the threads of one refill each take
  slot after slot until none is free or the bound is reached. A thread leaves once it finds
  the bound reached: whoever holds those starts looks again when each ends, so a slot freed
  meanwhile is still filled.
- Members of draining or disabled hosts, and members beyond the pool size, are removed;
  anything that leaks (a worker dying mid-provision) is an orphan for reconciliation, and a
  row still provisioning after STALE_PROVISIONING is dropped.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from hosts.backends import get_backend
from hosts.backends.base import BackendError, SandboxBackend, SandboxSpec, Unsupported
from hosts.models import Host, Image
from sandboxes.housekeeping.config import default_pool_size, instance_labels
from sandboxes.models import WarmContainer, WarmContainerStatus
from sandboxes.policy import limits
from tenants.auditing import calls_in_flight

logger = logging.getLogger(__name__)

READY = WarmContainerStatus.READY
PROVISIONING = WarmContainerStatus.PROVISIONING
# A member still provisioning after this long belongs to a worker that died.
STALE_PROVISIONING = timedelta(minutes=10)
REQUEST_GAP = 0.2  # seconds between two refill tasks one process queues
QUIET = 0.3  # seconds without a claim before a refill is queued (RefillRequests)
MAX_DEFERRAL = 5.0  # but no later than this after the first claim it was asked for


def pool_size(image: Image) -> int:
    return image.warm_pool_size or default_pool_size()


def starts_per_host() -> int:
    return int(settings.SANDHUB_POOL_STARTS_PER_HOST)


def discard(member: WarmContainer, backend: SandboxBackend) -> None:
    """Remove a member's container and row; if the host refuses, reconciliation removes it."""
    with contextlib.suppress(BackendError):
        backend.destroy(member.backend_state or {"sandbox_id": member.pool_id})
    WarmContainer.objects.filter(pk=member.pk).delete()


# --- asking for a refill ----------------------------------------------------------------------


class RefillRequests:
    """This process's asks for a refill, turned into at most one queued task per REQUEST_GAP,
    once claims pause and no call is being served (QUIET, MAX_DEFERRAL), by a thread of its
    own (started on the first ask, and again in a forked child)."""

    def __init__(self, enqueue: Callable[[], None] | None = None) -> None:
        self._enqueue = enqueue  # tests' own; else the module's, looked up when needed
        self._asked = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def ask(self) -> None:
        self._asked.set()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="sandhub-refill-requests", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            self._asked.wait()
            self._wait_for_a_lull()
            try:
                (self._enqueue or _enqueue)()
            except Exception:  # the schedule refills anyway; nothing a claim must fail for
                logger.warning("could not queue a warm-pool refill", exc_info=True)
            finally:
                connection.close()  # this thread's own; it may sleep for hours
            time.sleep(REQUEST_GAP)

    def _wait_for_a_lull(self) -> None:
        """Until claims pause for QUIET seconds, or MAX_DEFERRAL after the first ask.

        Claims come in bursts (an agent fanning out, a test matrix). A member's start costs
        the machine ~0.3 s of CPU (the engine, runc, the disk's mkfs, the keepers' agents):
        a refill begun mid-burst took half of two cores from the burst's own creates and
        first commands (bench/bench_lifecycle.py), and its members serve only the next
        burst anyway. Asks spaced wider than QUIET (one user's creates) wait QUIET alone.
        The lull also waits for this process to serve no call: a burst's creates end before
        its first commands do, and the refill would have taken the CPU from those.
        """
        first = time.monotonic()
        while True:
            self._asked.clear()  # an ask from now on queues one more task after this one
            if time.monotonic() - first >= MAX_DEFERRAL:
                return
            if not self._asked.wait(QUIET) and calls_in_flight() == 0:
                return


def _enqueue() -> None:
    from django_q.tasks import async_task

    async_task("sandboxes.tasks.refill_pools", task_name="refill warm pools")


_requests = RefillRequests()


def queue_refill() -> None:
    """Ask for a refill once the current transaction commits (a claim's)."""
    transaction.on_commit(_requests.ask)


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
    """Start members for the free slots, a few at a time; False when the host cannot have a
    pool right now."""
    taken = WarmContainer.objects.filter(host=host, image=image, slot__isnull=False).count()
    threads = min(size - taken, starts_per_host())
    if threads <= 0:
        return True
    if threads == 1 or connection.in_atomic_block:
        # Inside a caller's transaction (a test's) other threads' connections would not see
        # its rows, and would wait for its write lock: one after another, in this thread.
        return _fill_slots(host, image, size, report)

    def fill_in_thread(_: int) -> bool:
        try:
            return _fill_slots(host, image, size, report)
        finally:
            connection.close()  # the thread's own connection

    with ThreadPoolExecutor(threads, thread_name_prefix="sandhub-refill") as pool:
        return all(list(pool.map(fill_in_thread, range(threads))))


def _fill_slots(host: Host, image: Image, size: int, report: RefillReport) -> bool:
    """Start members one after another while a slot is free and the host's bound allows."""
    while True:
        member = _reserve(host, image, size)
        if member is None:
            return True
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
        ready = WarmContainer.objects.filter(pk=member.pk, status=PROVISIONING).update(
            status=READY, backend_state=state, ready_at=timezone.now()
        )
        if not ready:  # the row was dropped as stale meanwhile: do not leak the container
            with contextlib.suppress(BackendError):
                get_backend(host).destroy(state)
            continue
        report.started.append(member.pool_id)


def _reserve(host: Host, image: Image, size: int) -> WarmContainer | None:
    """A provisioning row for the first free slot, unless none is free or the host already
    starts as many members as it may; the count and the row in one transaction."""
    try:
        with transaction.atomic():
            # PostgreSQL: reservations for one host queue here. SQLite ignores FOR UPDATE;
            # its transaction holds the database's write lock from its start.
            list(Host.objects.select_for_update().filter(pk=host.pk).values_list("pk"))
            if WarmContainer.objects.filter(host=host, status=PROVISIONING).count() >= (
                starts_per_host()
            ):
                return None
            taken = set(
                WarmContainer.objects.filter(
                    host=host, image=image, slot__isnull=False
                ).values_list("slot", flat=True)
            )
            free = next((slot for slot in range(size) if slot not in taken), None)
            if free is None:
                return None
            return WarmContainer.objects.create(host=host, image=image, slot=free)
    except IntegrityError:  # a slot taken meanwhile (reservations outside this module)
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
        status=PROVISIONING,
        created_at__lt=timezone.now() - STALE_PROVISIONING,
    ).select_related("host")
    for member in stale:
        if member.host.healthy:
            discard(member, get_backend(member.host))
        else:
            member.delete()  # its container, if any, is an orphan for reconciliation
        report.removed.append(member.pool_id)
