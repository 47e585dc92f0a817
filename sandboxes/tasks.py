"""django-q2 tasks. Each is a thin call into sandboxes.services as the system; the schedules
that run the lifecycle ones are created on migrate (sandboxes/housekeeping/schedules.py).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from typing import Any

from django_q.conf import Conf
from django_q.tasks import async_task

from sandboxes import services
from sandboxes.housekeeping import leases
from sandboxes.models import CommandExecution, CommandStatus, LeaseEnd
from tenants.principal import Principal

logger = logging.getLogger(__name__)

# --- lifecycle: auto-cleanup, host probes, reconciliation, warm pool -------------------------
# Each returns a plain dict, which django-q2 keeps as the task's result (admin: Successful
# tasks).


def sweep() -> dict[str, Any]:
    """Every minute: delete sandboxes past their lifetime or idle beyond the team's timeout."""
    return services.sweep_expired_and_idle(Principal.system()).as_dict()


def probe_hosts() -> dict[str, Any]:
    """Every minute: health, cpu, memory and gpu use, and idle score of every enabled host."""
    hosts = services.probe_all_hosts(Principal.system())
    return {h.name: {"healthy": h.healthy, "idle_score": h.idle_score} for h in hosts}


def reconcile() -> dict[str, Any]:
    """Every 5 minutes: orphan containers removed, vanished sandboxes lost, silent hosts down."""
    return services.reconcile_hosts(Principal.system()).as_dict()


def sample_usage() -> dict[str, Any]:
    """Every minute (or SANDHUB_USAGE_SAMPLE_SECONDS): a usage sample of each running sandbox."""
    return services.sample_all_usage(Principal.system())


def refill_pools() -> dict[str, Any]:
    """Every minute, and after each claim: bring every warm pool to its size."""
    return services.refill_warm_pools(Principal.system()).as_dict()


# --- background commands: supervision ----------------------------------------------------------
# The command itself runs detached in its sandbox and records its own exit code there; these
# tasks only watch it and write the end into its CommandExecution (see supervise_background).

POLL_SECONDS = 1.0  # between two looks at a running command
SLICE_SECONDS = 20.0  # one task supervises this long, then queues its continuation
SUPERVISE = "sandboxes.tasks.supervise_background"


def supervise_background(command_id: int, token: str | None = None) -> str:
    """Watch one background command until it ends; record its end in its CommandExecution.

    Every POLL_SECONDS it calls services.background_tick, which polls the job in the sandbox,
    kills it once past its maximum runtime (the sandbox's own timeout normally gets there
    first) and records the final status, exit code and output tail.

    Restart safety. The job does not depend on this task: it runs in its own session inside
    the sandbox and writes its exit code to a file there, so a supervisor that dies loses
    nothing but time. Whoever looks next records the end: check_background, cancel_background,
    or the next supervisor. Supervisors are found again through a lease kept in the row's
    background_state["supervisor"] (token, expiry, host, pid and process start time of the
    worker holding it):

    - the supervisor renews its lease every RENEW_SECONDS; if it dies, the lease runs out after
      LEASE_SECONDS, or at once if its holder was on this machine and its process is gone;
    - `recover_background` queues a new supervisor for every running background command whose
      lease is free like that. It runs when each worker process starts (django-q2's post_spawn
      signal, see apps.py), so a worker killed with SIGKILL and restarted, or reincarnated by
      the cluster, takes its commands back within seconds; and every minute as the schedule
      sandhub.recover_background (created on migrate, sandboxes/housekeeping/schedules.py), for
      supervisors lost any other way (a failed task, a worker on another machine). A command
      with no lease yet waits QUEUED_LEASE_SECONDS for the supervisor start_background queued
      (as does one whose queued supervisor waits for a busy worker) before it is recovered,
      unless the platform process that started it died (its liveness lease expired: it may
      have died before queuing that supervisor): then at once, and whoever ends that lease
      (housekeeping/liveness.py) queues recover_background.
    - Two supervisors never run one command at once: taking the lease is a row-locked
      compare-and-set, and a supervisor that finds another's live lease returns.

    django-q2's own redelivery is no help here: with the ORM broker an unacknowledged task
    comes back only after Q_CLUSTER["retry"] seconds, set to the task timeout + 60 (an hour
    by default); when it does come back it finds the lease taken or the command over and
    returns. The row is the only record of who supervises, so every delivery is harmless.

    The lease is bookkeeping about workers (sandboxes/housekeeping/leases.py); what a look at
    the command means (its status, its kill, its record) is decided in
    services.background_tick.

    Slices. One task watches for SLICE_SECONDS (less if the cluster's timeout or retry is
    shorter), then queues its continuation under the same token and returns: a job that
    runs for hours never holds a worker for hours (other tasks get their turn between
    slices), never hits the cluster's task timeout, and a graceful worker stop waits at most
    one slice.
    """
    token = token or uuid.uuid4().hex
    system = Principal.system()
    stop_at = time.monotonic() + _slice_seconds()
    while True:
        if not leases.hold(command_id, token):
            return "supervised elsewhere, or over"
        if services.background_tick(system, command_id):
            return "over"
        if time.monotonic() >= stop_at:
            return "continued" if _continue_later(command_id, token) else "handed over"
        time.sleep(POLL_SECONDS)


def recover_background() -> dict[str, Any]:
    """Queue a supervisor for every running background command that has none (see above)."""
    running = CommandExecution.objects.filter(background=True, status=CommandStatus.RUNNING)
    requeued = []
    for pk, started_at, starter_end in running.values_list("pk", "started_at", "lease__end"):
        token = uuid.uuid4().hex
        free = functools.partial(
            leases.orphaned, started_at=started_at, starter_died=starter_end == LeaseEnd.EXPIRED
        )
        if leases.take(pk, leases.queued(token), free):
            async_task(SUPERVISE, pk, token, task_name=f"supervise-background-{pk}")
            requeued.append(pk)
    if requeued:
        logger.info("background commands re-supervised: %s", requeued)
    return {"requeued": requeued}


def recover_on_worker_start(sender: Any = None, **kwargs: Any) -> None:
    """django-q2 post_spawn receiver: a new worker process queues recover_background."""
    try:
        async_task("sandboxes.tasks.recover_background", task_name="recover-background")
    except Exception:  # never keep a worker from starting; the schedule recovers later
        logger.exception("could not queue recover_background")


def _slice_seconds() -> float:
    bounds = [SLICE_SECONDS]
    if Conf.TIMEOUT:
        bounds.append(Conf.TIMEOUT - 10)  # stay well under the cluster's task timeout
    if Conf.RETRY:
        bounds.append(Conf.RETRY / 2)  # and never look unacknowledged for too long
    return max(POLL_SECONDS, min(bounds))


def _continue_later(command_id: int, token: str) -> bool:
    """Queue the next slice under our token, if the command is still ours."""
    if not leases.take(command_id, leases.queued(token), lambda lease: leases.ours(lease, token)):
        return False
    async_task(SUPERVISE, command_id, token, task_name=f"supervise-background-{command_id}")
    return True
