"""create_sandbox(request_id=...): a retry gets the sandbox its first try made, never a second
one; a reuse of the id for other arguments is refused; ids are each team's own."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from sandboxes import services
from sandboxes.contract.errors import BackendFailure, Conflict, InvalidInput, NotFound
from sandboxes.models import Sandbox, SandboxStatus
from sandboxes.services import create_requests
from tenants.models import AuditLog
from tests.fakes import FakeBackend

pytestmark = pytest.mark.django_db

REQUEST = "7f1c9e0a-3b7d-4a51-9d3e-0c2b6f1a8e44"


def test_a_retry_gets_the_same_sandbox(fake_backend, as_alice):
    first = services.create_sandbox(as_alice, name="job", memory_mb=256, request_id=REQUEST)
    again = services.create_sandbox(as_alice, name="job", memory_mb=256, request_id=REQUEST)
    assert again.id == first.id and again.status == "running"
    assert len(fake_backend.sandboxes) == 1 and Sandbox.objects.count() == 1
    rows = AuditLog.objects.filter(action="sandbox.create", target_id=first.id)
    assert [r.details.get("retry", False) for r in rows.order_by("pk")] == [False, True]
    assert all(r.details["request_id"] == REQUEST for r in rows)


def test_without_a_request_id_each_call_makes_its_own(fake_backend, as_alice):
    ids = {services.create_sandbox(as_alice, name="job").id for _ in range(2)}
    assert len(ids) == 2


def test_a_retry_after_the_sandbox_was_deleted_says_so(fake_backend, as_alice):
    first = services.create_sandbox(as_alice, request_id=REQUEST)
    services.delete_sandbox(as_alice, first.id)
    again = services.create_sandbox(as_alice, request_id=REQUEST)
    assert (again.id, again.status) == (first.id, "deleted")
    assert len(fake_backend.sandboxes) == 0


def test_the_same_id_with_other_arguments_is_refused(fake_backend, as_alice):
    first = services.create_sandbox(as_alice, name="job", request_id=REQUEST)
    with pytest.raises(Conflict, match="already used for a sandbox with other arguments"):
        services.create_sandbox(as_alice, name="other", request_id=REQUEST)
    with pytest.raises(Conflict):
        services.create_sandbox(as_alice, name="job", memory_mb=256, request_id=REQUEST)
    assert list(Sandbox.objects.values_list("public_id", flat=True)) == [first.id]


@pytest.mark.parametrize("bad", ["", " ", "a" * 101, "-x", "a/b", "a b", "é", 42])
def test_a_malformed_request_id_is_refused_and_changes_nothing(fake_backend, as_alice, bad):
    with pytest.raises(InvalidInput, match="request_id"):
        services.create_sandbox(as_alice, request_id=bad)
    assert not Sandbox.objects.exists() and fake_backend.sandboxes == {}


def test_request_ids_are_each_teams_own(fake_backend, as_alice, as_bob):
    mine = services.create_sandbox(as_alice, request_id=REQUEST)
    theirs = services.create_sandbox(as_bob, request_id=REQUEST)
    assert theirs.id != mine.id
    # Other arguments under another team's id are another request, not a conflict.
    other = services.create_sandbox(as_bob, name="x", request_id="another")
    assert other.id not in (mine.id, theirs.id)
    with pytest.raises(NotFound):
        services.get_sandbox(as_bob, mine.id)
    assert services.create_sandbox(as_alice, request_id=REQUEST).id == mine.id


def test_a_failed_first_try_lets_a_retry_start_afresh(fake_backend, as_alice):
    fake_backend.fail_provision = "engine down"
    with pytest.raises(BackendFailure, match="engine down"):
        services.create_sandbox(as_alice, request_id=REQUEST)
    failed = Sandbox.objects.get()
    assert failed.status == SandboxStatus.DELETED and failed.request_id is None
    fake_backend.fail_provision = None
    retried = services.create_sandbox(as_alice, request_id=REQUEST)
    assert retried.id != failed.public_id and retried.status == "running"


def test_a_viewer_is_refused_before_any_request_is_looked_up(fake_backend, as_alice, as_victor):
    services.create_sandbox(as_alice, request_id=REQUEST)
    with pytest.raises(Exception, match="may not create sandboxes|not allowed|viewer"):
        services.create_sandbox(as_victor, request_id=REQUEST)


@pytest.mark.django_db(transaction=True)
def test_concurrent_tries_make_one_sandbox_and_wait_for_it(
    fake_backend, as_alice, monkeypatch: pytest.MonkeyPatch
):
    """Five threads send one request at once; the first one's container start is held until
    the other four are waiting for it: all five get the one sandbox, running."""
    tries = 5
    started, waiting, release = threading.Event(), threading.Semaphore(0), threading.Event()
    provision = FakeBackend.provision

    def held_provision(self, spec):
        started.set()
        assert release.wait(30), "the test never let the first try go on"
        return provision(self, spec)

    answer = create_requests.CreateRequest.answer

    def counted_answer(self, sandbox):
        waiting.release()  # one more retry found the first try's sandbox
        return answer(self, sandbox)

    monkeypatch.setattr(FakeBackend, "provision", held_provision)
    monkeypatch.setattr(create_requests.CreateRequest, "answer", counted_answer)
    barrier = threading.Barrier(tries)

    def create(_: int) -> str:
        try:
            barrier.wait(30)
            return services.create_sandbox(as_alice, name="once", request_id=REQUEST).id
        finally:
            connection.close()

    with ThreadPoolExecutor(tries) as pool:
        futures = [pool.submit(create, n) for n in range(tries)]
        assert started.wait(30)
        for _ in range(tries - 1):
            assert waiting.acquire(timeout=30)
        assert Sandbox.objects.get().status == SandboxStatus.STARTING
        release.set()
        ids = {future.result(timeout=60) for future in futures}
    assert len(ids) == 1 and Sandbox.objects.count() == 1
    assert Sandbox.objects.get().status == SandboxStatus.RUNNING
    assert len(fake_backend.sandboxes) == 1
