"""A qcluster worker's lease also names the django-q2 task it runs, so a worker that dies
(kill -9, out of memory) has that task handed back to the queue at once instead of after
Q_CLUSTER["retry"] (the task timeout + 60 s: an hour by default).

Every task of ours is safe to run again (sandboxes/tasks.py: the sweep, probes, reconciliation
and pool refills look at the state afresh; a background supervisor takes its command's lease
first, so a second one returns). With the ORM broker a delivered task's row stays in the queue,
locked until the retry time, until its result is saved: handing it back is setting that lock
to now. Other brokers redeliver on their own terms; nothing is done for them here.
"""

from __future__ import annotations

import logging
from typing import Any

from sandboxes.housekeeping import liveness
from sandboxes.models import ProcessKind, ProcessLease

logger = logging.getLogger(__name__)


def on_worker_start(sender: Any = None, **kwargs: Any) -> None:
    """django-q2 post_spawn (sent in the forked worker process): hold a lease from now on."""
    try:
        liveness.start(ProcessKind.WORKER)
    except Exception:  # never keep a worker from starting: its rows fall back to the sweep
        logger.exception("could not take this worker's liveness lease")


def on_task_start(sender: Any = None, task: dict[str, Any] | None = None, **kwargs: Any) -> None:
    """django-q2 pre_execute: the lease names the task the worker runs now (one UPDATE)."""
    lease_id = liveness.current_lease_id()
    if lease_id is None or not task:
        return
    ProcessLease.objects.filter(pk=lease_id).update(
        task_id=str(task.get("id", ""))[:64], task_name=str(task.get("name", ""))[:200]
    )
