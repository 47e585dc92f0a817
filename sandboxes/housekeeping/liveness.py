"""Liveness leases: the command rows of a platform process that died are closed at once.

Each web process (every one of `uvicorn --workers N`'s children: platform_site/asgi.py starts
it in the lifespan) and each qcluster worker (django-q2's post_spawn, in the forked worker:
sandboxes/apps.py) holds a ProcessLease row, renewed by a heartbeat thread every third of
SANDHUB_LEASE_SECONDS. Every command row the process records carries its lease.

A lease not renewed for SANDHUB_LEASE_SECONDS belongs to a dead process (kill -9, out of
memory, its machine gone). Any live process's heartbeat, and the sweep as a backstop, ends it
with a conditional UPDATE (`ended_at IS NULL AND expires_at < now`): whoever's UPDATE changes
the row ends it, once, on SQLite and PostgreSQL alike. Its foreground rows still running, and
its background rows never started, are then closed as errors naming the process; each
row's UPDATE is conditional on its status, so a row is closed exactly once.

Clocks: expiry is set and compared with the database's clock (Now() in SQL), never a node's,
so skew between nodes does not matter. A process paused past its expiry (SIGSTOP, a long GC
or swap, cut off from the database) finds its lease ended at its next renewal and takes a new
one; a command of the old lease that then finishes does not overwrite its closed row
(services/commands.py: `record_unless_closed`), and its caller is told.

Management commands (migrate, shell) hold no lease: their rows are left to the sweep's
timeout-plus-grace rule, as are rows from before leases.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections
from django.db.models import DateTimeField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.utils import timezone

from sandboxes.models import (
    CommandExecution,
    CommandStatus,
    LeaseEnd,
    ProcessKind,
    ProcessLease,
)

logger = logging.getLogger(__name__)

STOPPED = "the platform process running it stopped ({holder}): it was killed or lost its machine"
NEVER_STARTED = "the platform process starting it stopped ({holder}) before it started"
SURE_MARGIN = 1.0  # seconds of a renewal's age we do not trust to the local clock


def lease_seconds() -> float:
    return float(settings.SANDHUB_LEASE_SECONDS)


def _db_now_plus(seconds: float) -> ExpressionWrapper:
    return ExpressionWrapper(Now() + timedelta(seconds=seconds), output_field=DateTimeField())


# --- one lease ---------------------------------------------------------------------------------


def take(kind: str) -> int:
    """A new lease for this process; its id."""
    lease = ProcessLease.objects.create(
        hostname=socket.gethostname()[:255],
        pid=os.getpid(),
        kind=kind,
        started_at=Now(),
        renewed_at=Now(),
        expires_at=_db_now_plus(lease_seconds()),
    )
    return lease.pk


def renew(lease_id: int) -> bool:
    """Push the lease's expiry on; False when it was ended (we were taken for dead)."""
    return (
        ProcessLease.objects.filter(pk=lease_id, ended_at__isnull=True).update(
            renewed_at=Now(), expires_at=_db_now_plus(lease_seconds())
        )
        == 1
    )


def release(lease_id: int) -> None:
    """A clean exit: the lease ends (the process finished its own rows)."""
    ProcessLease.objects.filter(pk=lease_id, ended_at__isnull=True).update(
        ended_at=Now(), end=LeaseEnd.RELEASED
    )


# --- the dead ----------------------------------------------------------------------------------


def close_expired() -> int:
    """End every lease past its expiry and close its in-flight command rows; rows closed."""
    for lease in ProcessLease.objects.filter(ended_at__isnull=True, expires_at__lt=Now()):
        ended = ProcessLease.objects.filter(
            pk=lease.pk, ended_at__isnull=True, expires_at__lt=Now()
        ).update(ended_at=Now(), end=LeaseEnd.EXPIRED)
        if ended:  # ours to report; closing its rows below is safe for anyone to repeat
            logger.warning("platform process %s stopped renewing its lease", lease.holder)
            if lease.kind == ProcessKind.WORKER and lease.task_id:
                hand_back(lease.task_id, lease.task_name)
            if unsupervised_jobs_of(lease.pk):
                queue_recovery()
    return close_rows_of_dead()


def unsupervised_jobs_of(lease_id: int) -> bool:
    """Whether the dead process left started background commands with no supervisor yet (it
    died between the row's RUNNING and queuing their first supervisor)."""
    rows = CommandExecution.objects.filter(
        lease_id=lease_id, background=True, status=CommandStatus.RUNNING
    ).values_list("background_state", flat=True)
    return any(not (state or {}).get("supervisor") for state in rows)


def queue_recovery() -> None:
    """Queue recover_background now (it also runs every minute): it takes the dead process's
    unsupervised commands at once (housekeeping/leases.py: orphaned)."""
    from django_q.tasks import async_task

    try:
        async_task("sandboxes.tasks.recover_background", task_name="recover-background")
    except Exception:  # the schedule's next run recovers them
        logger.exception("could not queue recover_background")


def in_flight() -> Q:
    """Rows their recorder still owes an end: a foreground command running, a background one
    never started (a started one is supervised by workers: housekeeping/leases.py)."""
    return Q(background=False, status=CommandStatus.RUNNING) | Q(
        background=True, status=CommandStatus.QUEUED
    )


def close_rows_of_dead() -> int:
    """Close the in-flight rows of every lease that expired (also rows written under a lease
    just after it was ended: a process paused between reading its lease and its INSERT)."""
    dead = CommandExecution.objects.filter(in_flight(), lease__end=LeaseEnd.EXPIRED)
    closed = 0
    for lease_id in set(dead.values_list("lease_id", flat=True)):
        lease = ProcessLease.objects.get(pk=lease_id)
        now = timezone.now()
        for rows, why in (
            (dead.filter(lease_id=lease_id, background=False), STOPPED),
            (dead.filter(lease_id=lease_id, background=True), NEVER_STARTED),
        ):
            closed += rows.update(
                status=CommandStatus.ERROR,
                error_message=why.format(holder=lease.holder),
                finished_at=now,
            )
    return closed


def forget_ended(before: timedelta = timedelta(days=1)) -> int:
    """Delete lease rows ended long ago (their command rows keep nothing but a null)."""
    deleted, _ = ProcessLease.objects.filter(ended_at__lt=timezone.now() - before).delete()
    return deleted


def hand_back(task_id: str, task_name: str) -> bool:
    """Unlock the dead worker's task in the ORM broker's queue (workertasks.py says why); True if
    it was still there."""
    from django_q.conf import Conf
    from django_q.models import OrmQ

    if not Conf.ORM:
        return False
    now = timezone.now()
    for queued in OrmQ.objects.filter(lock__gt=now).only("pk", "payload"):
        if queued.task_id() == task_id:
            OrmQ.objects.filter(pk=queued.pk).update(lock=now)
            logger.warning(
                "task %s (%s) of a dead worker handed back to the queue", task_id, task_name
            )
            return True
    return False


# --- this process's heartbeat ------------------------------------------------------------------


class Heartbeat:
    """This process's lease, renewed by a daemon thread; it closes the dead's rows as it goes."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.pid = os.getpid()
        self.lease_id: int | None = None
        self.renewed_at = 0.0  # time.monotonic() when the last renewal that held was sent
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.renewed_at = time.monotonic()
        try:
            self.lease_id = take(self.kind)  # before any request: its rows carry the lease
        except Exception:  # the database away at start: the first beat takes it
            logger.warning("could not take a liveness lease yet", exc_info=True)
        self._thread = threading.Thread(target=self._run, name="sandhub-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.lease_id is not None:
            release(self.lease_id)

    def beat(self) -> None:
        sent = time.monotonic()
        if self.lease_id is None or not renew(self.lease_id):
            if self.lease_id is not None:
                logger.error(
                    "this process's lease %s was ended by another (it stopped for over %g s): "
                    "its running commands were closed; taking a new lease",
                    self.lease_id,
                    lease_seconds(),
                )
            self.lease_id = take(self.kind)
        self.renewed_at = sent
        close_expired()

    def surely_held(self, lease_id: int) -> bool:
        """True when the lease is ours and renewed recently enough that nobody can have ended
        it (its age by our monotonic clock, less a margin, is under the lease's length)."""
        age = time.monotonic() - self.renewed_at
        return lease_id == self.lease_id and age < lease_seconds() - SURE_MARGIN

    def _run(self) -> None:
        every = lease_seconds() / 3
        while not self._stop.wait(every):
            close_old_connections()  # a thread, not a request: nobody else closes them
            try:
                self.beat()
            except Exception:  # the database busy or away: the next beat tries again
                logger.warning("liveness heartbeat failed", exc_info=True)
            finally:
                close_old_connections()


_heartbeat: Heartbeat | None = None


def start(kind: str = ProcessKind.WEB) -> None:
    """Hold a lease from now on, in this process (a web process or a qcluster worker)."""
    global _heartbeat
    if _heartbeat is not None and _heartbeat.pid == os.getpid():
        return
    _heartbeat = Heartbeat(kind)  # a forked child never uses its parent's lease
    _heartbeat.start()


def stop() -> None:
    global _heartbeat
    if _heartbeat is not None and _heartbeat.pid == os.getpid():
        _heartbeat.stop()
    _heartbeat = None


def current_lease_id() -> int | None:
    """The lease this process's new command rows carry; None without a heartbeat."""
    if _heartbeat is None or _heartbeat.pid != os.getpid():
        return None
    return _heartbeat.lease_id


def surely_held(lease_id: int | None) -> bool:
    """Whether a row of this lease certainly was not closed for its process's death."""
    if lease_id is None:
        return True
    return (
        _heartbeat is not None
        and _heartbeat.pid == os.getpid()
        and _heartbeat.surely_held(lease_id)
    )
