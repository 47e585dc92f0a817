"""Refilling the warm pool (sandboxes/housekeeping/poolfill.py): a real django-q2 cluster
refills as soon as a member is claimed, with no schedule to help; every refill together
starts at most SANDHUB_POOL_STARTS_PER_HOST members on a host at once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import docker
import pytest
from django.db import connection
from django_q.models import Schedule, Success

from sandboxes import services
from sandboxes.housekeeping import poolfill
from sandboxes.models import WarmContainer
from tenants.auditing import audited, calls_in_flight
from tenants.models import AuditKind
from tenants.principal import Principal
from tests.engine import engine_cleaning_up
from tests.fakes import FakeBackend
from tests.qcluster import QCluster

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"
SYSTEM = Principal.system()


def ready() -> int:
    return WarmContainer.objects.filter(status="ready").count()


# --- the bound, over two refills at once (as two workers would run them) ---------------------


@pytest.mark.django_db(transaction=True)
def test_refills_together_start_at_most_the_bound_per_host(
    fake_backend, image, settings, monkeypatch: pytest.MonkeyPatch
):
    settings.SANDHUB_POOL_STARTS_PER_HOST = 2
    image.warm_pool_size = 6
    image.save()
    lock, gate = threading.Lock(), threading.Event()
    started, refused = threading.Semaphore(0), threading.Semaphore(0)
    starts = {"now": 0, "most": 0}
    provision, reserve = FakeBackend.provision_pool_member, poolfill._reserve

    def held_provision(self: FakeBackend, spec: Any) -> dict[str, Any]:
        with lock:
            starts["now"] += 1
            starts["most"] = max(starts["most"], starts["now"])
        started.release()
        try:
            assert gate.wait(30), "the test never let the starts go on"
            return provision(self, spec)
        finally:
            with lock:
                starts["now"] -= 1

    def counted_reserve(*args: Any) -> WarmContainer | None:
        member = reserve(*args)
        if member is None:
            refused.release()
        return member

    monkeypatch.setattr(FakeBackend, "provision_pool_member", held_provision)
    monkeypatch.setattr(poolfill, "_reserve", counted_reserve)

    def refill() -> None:
        try:
            services.refill_warm_pools(SYSTEM)
        finally:
            connection.close()

    refills = [threading.Thread(target=refill) for _ in range(2)]
    for thread in refills:
        thread.start()
    # Two refills of two threads each: two starts are held, the other two threads find the
    # bound reached and leave.
    for semaphore in (started, started, refused, refused):
        assert semaphore.acquire(timeout=30)
    assert starts["now"] == 2
    assert WarmContainer.objects.filter(status="provisioning").count() == 2
    gate.set()
    for thread in refills:
        thread.join(60)
    assert ready() == 6 and starts["most"] == 2


def test_a_refill_is_asked_for_once_per_gap_however_many_claims():
    """A burst of claims queues a few tasks, not one each; an ask after the last queued
    task still queues one more (nothing it asked for is left to the schedule)."""
    queued: list[float] = []
    enqueued = threading.Semaphore(0)

    def enqueue() -> None:
        queued.append(time.monotonic())
        enqueued.release()

    requests = poolfill.RefillRequests(enqueue)
    for _ in range(50):
        requests.ask()
    assert enqueued.acquire(timeout=10)  # the burst's first task
    requests.ask()  # after that task was queued: one more is, a gap later at least
    assert enqueued.acquire(timeout=10)
    assert 2 <= len(queued) <= 3
    assert all(b - a >= poolfill.REQUEST_GAP * 0.9 for a, b in pairwise(queued))


def test_a_refill_waits_for_claims_to_pause_but_not_forever(monkeypatch):
    """A burst of claims is not slowed by a refill starting under it: nothing is queued while
    claims keep coming closer than QUIET, until MAX_DEFERRAL; then once they pause."""
    monkeypatch.setattr(poolfill, "QUIET", 0.5)
    monkeypatch.setattr(poolfill, "MAX_DEFERRAL", 1.5)
    queued: list[float] = []
    # Its own enqueue: another test's requester thread may still queue its last task.
    requests = poolfill.RefillRequests(lambda: queued.append(time.monotonic()))
    started = time.monotonic()
    while time.monotonic() - started < 1.0:  # a burst shorter than MAX_DEFERRAL
        requests.ask()
        time.sleep(0.02)
    last_ask = time.monotonic()
    assert queued == []  # not during the burst
    time.sleep(1.0)
    assert len(queued) == 1 and queued[0] >= last_ask

    queued.clear()
    started = time.monotonic()
    while time.monotonic() - started < 3.0:  # a burst longer than MAX_DEFERRAL
        requests.ask()
        time.sleep(0.02)
    assert queued and queued[0] - started < 3.0  # queued during it, not after


def test_a_refill_waits_for_the_calls_being_served_but_not_forever(monkeypatch):
    """A burst's creates end before its first commands do: the refill is not queued while
    the process still serves calls, until MAX_DEFERRAL."""
    monkeypatch.setattr(poolfill, "QUIET", 0.2)
    monkeypatch.setattr(poolfill, "MAX_DEFERRAL", 2.0)
    queued: list[float] = []
    # Its own enqueue: another test's requester thread may still queue its last task.
    requests = poolfill.RefillRequests(lambda: queued.append(time.monotonic()))
    serving = threading.Event()
    ended: list[float] = []

    @audited("test.call", kind=AuditKind.VIEW)
    def a_call(principal: Principal) -> None:
        serving.set()
        time.sleep(0.8)  # a first command, running after the last claim
        ended.append(time.monotonic())

    caller = threading.Thread(target=a_call, args=(SYSTEM,))
    caller.start()
    assert serving.wait(5)
    assert calls_in_flight() >= 1
    requests.ask()
    caller.join(10)
    time.sleep(0.6)
    assert len(queued) == 1 and queued[0] >= ended[0]  # after the call, not after QUIET
    assert calls_in_flight() == 0

    queued.clear()
    stuck = threading.Event()

    @audited("test.call", kind=AuditKind.VIEW)
    def a_long_call(principal: Principal) -> None:
        stuck.wait(10)

    caller = threading.Thread(target=a_long_call, args=(SYSTEM,))
    caller.start()
    try:
        asked = time.monotonic()
        requests.ask()
        deadline = time.monotonic() + 5
        while not queued and time.monotonic() < deadline:
            time.sleep(0.05)
        assert queued and 2.0 <= queued[0] - asked < 3.0  # MAX_DEFERRAL bounds the wait
    finally:
        stuck.set()
        caller.join(10)


# --- a real cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(django_db_setup, tmp_path_factory) -> Iterator[QCluster]:
    """A cluster labelling its containers with this module's instance."""
    running = QCluster(
        tmp_path_factory.mktemp("qcluster") / "qcluster.log", env={"SANDHUB_INSTANCE": INSTANCE}
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    with engine_cleaning_up(INSTANCE) as client:
        yield client


def refilled_by_the_worker() -> bool:
    return ready() == 2 and Success.objects.filter(func="sandboxes.tasks.refill_pools").exists()


@pytest.mark.qcluster
@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_the_worker_refills_as_soon_as_a_member_is_claimed(
    real_docker, image, as_alice, settings, cluster, engine
):
    settings.SANDHUB_INSTANCE = INSTANCE
    Schedule.objects.filter(func="sandboxes.tasks.refill_pools").delete()  # the claim alone
    image.warm_pool_size = 2
    image.save()
    services.refill_warm_pools(SYSTEM)
    assert ready() == 2
    info = services.create_sandbox(as_alice)
    try:
        assert ready() == 1
        # Another process: polled. The member is ready inside the task; django-q's monitor
        # saves the task's Success only after the task has returned, a moment later.
        deadline = time.monotonic() + 60
        while not refilled_by_the_worker() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready() == 2, cluster.log_since_start()[-2000:]
        assert refilled_by_the_worker(), cluster.log_since_start()[-2000:]
    finally:
        services.delete_sandbox(as_alice, info.id)
        image.warm_pool_size = 0
        image.save()
        services.refill_warm_pools(SYSTEM)
