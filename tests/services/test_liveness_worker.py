"""A qcluster worker killed with SIGKILL mid-task: its task is handed back at once.

A real `manage.py qcluster` (tests/qcluster.py) with SANDHUB_LEASE_SECONDS=4: each forked
worker takes a liveness lease (django-q2's post_spawn) naming the task it runs (pre_execute).
The cluster is killed as a crash would; the test process plays the other live platform
process, whose heartbeat ends the dead lease and unlocks the task in the ORM broker's queue;
a new cluster then runs it to the end. On the code before leases the task stayed locked for
Q_CLUSTER["retry"] (the task timeout + 60 s: an hour).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ, Task
from django_q.tasks import async_task

from sandboxes.housekeeping import liveness
from sandboxes.models import ProcessLease
from tests.qcluster import QCluster
from tests.services.helpers import wait_for

pytestmark = [pytest.mark.qcluster, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 4
TASK_SECONDS = 6  # long enough to be killed in, short enough to run again to its end


@pytest.fixture
def cluster(tmp_path, settings):
    settings.SANDHUB_LEASE_SECONDS = LEASE_SECONDS
    running = QCluster(tmp_path / "qcluster.log", env={"SANDHUB_LEASE_SECONDS": "4"})
    running.start()
    yield running
    running.stop()


def test_a_killed_workers_task_is_handed_back_and_run_again(cluster):
    task_id = async_task("time.sleep", TASK_SECONDS, task_name="long-task")
    lease = wait_for(
        lambda: ProcessLease.objects.filter(kind="worker", task_id=task_id).first(),
        30,
        "a worker's lease naming the task",
    )
    assert lease.ended_at is None and lease.task_name == "long-task"
    cluster.kill()
    assert queued(task_id).lock > timezone.now() + timedelta(minutes=30)  # Q_CLUSTER's retry

    liveness.start()  # this process: a live platform process with a heartbeat
    try:
        wait_for(
            lambda: queued(task_id).lock <= timezone.now(),
            LEASE_SECONDS * 4,
            "the dead worker's task to be handed back",
        )
    finally:
        liveness.stop()
    assert ProcessLease.objects.get(pk=lease.pk).end == "expired"

    cluster.start()
    done = wait_for(
        lambda: Task.objects.filter(id=task_id).first(), 60, "the task to run again to its end"
    )
    assert done.success


def queued(task_id: str) -> OrmQ:
    """The task's row in the ORM broker's queue (others may be there: each new worker queues
    recover_background)."""
    (row,) = (row for row in OrmQ.objects.all() if row.task_id() == task_id)
    return row
