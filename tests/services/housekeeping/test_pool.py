"""Warm pool: refill, claim, fallbacks, quotas and listings, and cleanup.

The first half runs on the in-memory backend (fast); the second on the real Docker engine.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import docker
import pytest
from django.db import connection

from hosts.backends.base import LABEL_INSTANCE, LABEL_POOL
from sandboxes import services, tasks
from sandboxes.contract.errors import QuotaExceeded
from sandboxes.housekeeping import pool
from sandboxes.models import Sandbox, WarmContainer
from tenants.models import AuditLog
from tenants.principal import Principal
from tests.engine import engine_cleaning_up
from tests.fakes import FakeBackend

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"
SYSTEM = Principal.system()


@pytest.fixture(autouse=True)
def own_instance(settings):
    settings.SANDHUB_INSTANCE = INSTANCE
    FakeBackend.down_hosts = set()
    FakeBackend.fail_claim = None
    yield
    FakeBackend.fail_claim = None


@pytest.fixture
def pooled(image):
    """The default image with a pool of 2 per host."""
    image.warm_pool_size = 2
    image.save()
    return image


def ready_members(host=None) -> list[WarmContainer]:
    members = WarmContainer.objects.filter(status="ready")
    return list(members.filter(host=host) if host else members)


# --- in-memory backend -----------------------------------------------------------------------


def test_refill_fills_each_pool_to_its_size_once(fake_backend, pooled, docker_host):
    report = services.refill_warm_pools(SYSTEM)
    assert len(report.started) == 2 and report.errors == []
    assert len(ready_members(docker_host)) == 2 and len(fake_backend.sandboxes) == 2
    assert sorted(m.slot for m in ready_members()) == [0, 1]
    spec = next(iter(fake_backend.sandboxes.values()))["spec"]
    assert spec.network is False and spec.labels[LABEL_INSTANCE] == INSTANCE
    assert tasks.refill_pools()["started"] == []  # already full: nothing more
    assert len(fake_backend.sandboxes) == 2


def test_a_claim_makes_a_pool_member_the_new_sandbox(fake_backend, pooled, as_alice):
    services.refill_warm_pools(SYSTEM)
    info = services.create_sandbox(as_alice, cpus=0.5, memory_mb=128, env={"A": "1"})

    sandbox = Sandbox.objects.get(public_id=info.id)
    member = sandbox.warm_container
    assert (member.status, member.slot, info.status) == ("claimed", None, "running")
    box = fake_backend.sandboxes[sandbox.backend_state["container_id"]]
    assert box["claimed_by"] == info.id and box["limits"] == (0.5, 128, 256)
    assert services.run_command(as_alice, info.id, "printenv A").stdout == "1\n"
    assert AuditLog.objects.get(action="sandbox.create").details["warm_pool"] == member.pool_id
    assert len(ready_members()) == 1

    services.refill_warm_pools(SYSTEM)  # refills the freed slot
    assert sorted(m.slot for m in ready_members()) == [0, 1] and len(fake_backend.sandboxes) == 3
    services.delete_sandbox(as_alice, info.id)
    assert member.backend_state["container_id"] not in fake_backend.sandboxes


def test_pool_members_never_count_against_quota_nor_show_in_lists(
    fake_backend, pooled, as_alice, team_a
):
    team_a.max_running_sandboxes = 1
    team_a.save()
    services.refill_warm_pools(SYSTEM)
    assert services.list_sandboxes(as_alice) == []
    info = services.create_sandbox(as_alice)
    assert [s.id for s in services.list_sandboxes(as_alice)] == [info.id]
    with pytest.raises(QuotaExceeded):
        services.create_sandbox(as_alice)
    assert len(ready_members()) == 1  # the refused creation claimed nothing


def test_every_claim_gets_its_own_member_then_fresh_containers(fake_backend, pooled, as_alice):
    services.refill_warm_pools(SYSTEM)
    ids = [services.create_sandbox(as_alice).id for _ in range(3)]
    claimed = WarmContainer.objects.filter(status="claimed")
    assert sorted(m.sandbox.public_id for m in claimed) == sorted(ids[:2])
    assert len({m.pool_id for m in claimed}) == 2
    states = [Sandbox.objects.get(public_id=i).backend_state["container_id"] for i in ids]
    assert len(set(states)) == 3 and ready_members() == []


def test_a_team_with_network_gets_a_fresh_container(fake_backend, pooled, as_alice, team_a):
    team_a.allow_network = True
    team_a.save()
    services.refill_warm_pools(SYSTEM)
    info = services.create_sandbox(as_alice, network=True)
    assert not WarmContainer.objects.filter(sandbox__public_id=info.id).exists()
    assert len(ready_members()) == 2
    assert services.create_sandbox(as_alice, network=False).id  # this one may take a member
    assert len(ready_members()) == 1


def test_a_member_that_cannot_take_the_limits_is_discarded(fake_backend, pooled, as_alice):
    services.refill_warm_pools(SYSTEM)
    FakeBackend.fail_claim = "the engine refused the update"
    info = services.create_sandbox(as_alice)
    assert info.status == "running"
    assert not WarmContainer.objects.filter(sandbox__public_id=info.id).exists()
    # The unusable member is gone, container and row; the other is still ready.
    assert len(ready_members()) == 1 and len(fake_backend.sandboxes) == 2


def test_draining_and_disabled_hosts_lose_their_pool(fake_backend, pooled, docker_host):
    services.refill_warm_pools(SYSTEM)
    docker_host.draining = True
    docker_host.save()
    report = services.refill_warm_pools(SYSTEM)
    assert len(report.removed) == 2 and ready_members() == [] and fake_backend.sandboxes == {}
    docker_host.draining, docker_host.enabled = False, False
    docker_host.save()
    assert services.refill_warm_pools(SYSTEM).started == []


def test_shrinking_a_pool_removes_the_surplus(fake_backend, pooled):
    services.refill_warm_pools(SYSTEM)
    pooled.warm_pool_size = 1
    pooled.save()
    assert len(services.refill_warm_pools(SYSTEM).removed) == 1
    assert [m.slot for m in ready_members()] == [0] and len(fake_backend.sandboxes) == 1


def test_the_default_size_comes_from_the_setting_when_the_image_has_none(
    fake_backend, image, settings
):
    assert services.refill_warm_pools(SYSTEM).started == []  # 0 everywhere: no pool
    settings.SANDHUB_WARM_POOL_SIZE = 1
    assert len(services.refill_warm_pools(SYSTEM).started) == 1


def test_reconcile_keeps_pool_containers_and_forgets_vanished_ones(
    fake_backend, pooled, as_alice, settings
):
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 0
    services.refill_warm_pools(SYSTEM)
    claimed = services.create_sandbox(as_alice)
    for box in fake_backend.sandboxes.values():
        box["created"] -= 3600
    report = services.reconcile_hosts(SYSTEM)
    assert report.removed == [] and report.lost == [] and len(fake_backend.sandboxes) == 2

    [ready] = ready_members()
    fake_backend.sandboxes.pop(ready.backend_state["container_id"])
    assert services.reconcile_hosts(SYSTEM).stale_pool == [ready.pool_id]
    assert ready_members() == []
    assert Sandbox.objects.get(public_id=claimed.id).status == "running"


def test_a_member_stuck_provisioning_is_dropped(fake_backend, pooled, docker_host):
    from datetime import timedelta

    from django.utils import timezone

    stuck = WarmContainer.objects.create(host=docker_host, image=pooled, slot=0)
    WarmContainer.objects.filter(pk=stuck.pk).update(created_at=timezone.now() - timedelta(hours=1))
    report = services.refill_warm_pools(SYSTEM)
    assert stuck.pool_id in report.removed
    assert sorted(m.slot for m in ready_members()) == [0, 1]


def test_admin_lists_the_pool_read_only(fake_backend, pooled, admin_client):
    services.refill_warm_pools(SYSTEM)
    member = ready_members()[0]
    page = admin_client.get("/admin/sandboxes/warmcontainer/")
    assert page.status_code == 200 and member.pool_id in page.content.decode()
    assert (
        admin_client.get(f"/admin/sandboxes/warmcontainer/{member.pk}/change/").status_code == 200
    )
    assert admin_client.get("/admin/sandboxes/warmcontainer/add/").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_never_share_a_member(team_a, docker_host, pooled):
    """Six claimers, each with its own database connection, race for three members."""
    for slot in range(3):
        WarmContainer.objects.create(
            host=docker_host, image=pooled, slot=slot, status="ready", backend_state={"n": slot}
        )
    sandboxes = [
        Sandbox.objects.create(
            team=team_a, host=docker_host, image=pooled, cpus=1, memory_mb=128, pids_limit=64
        )
        for _ in range(6)
    ]
    barrier = threading.Barrier(len(sandboxes))

    def claim(sandbox: Sandbox) -> str | None:
        try:
            barrier.wait()
            member = pool._take(sandbox)
            return member.pool_id if member else None
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(sandboxes)) as executor:
        claimed = list(executor.map(claim, sandboxes))
    won = [c for c in claimed if c]
    assert len(won) == 3 and len(set(won)) == 3
    pairs = WarmContainer.objects.filter(status="claimed").values_list("sandbox_id", flat=True)
    assert len(set(pairs)) == 3


# --- on the real Docker engine ---------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    with engine_cleaning_up(INSTANCE) as client:
        yield client


def pool_containers(engine: docker.DockerClient) -> list:
    selector = {"label": [f"{LABEL_INSTANCE}={INSTANCE}", f"{LABEL_POOL}=1"]}
    return engine.containers.list(all=True, filters=selector)


def run(principal, sandbox_id: str, command: str) -> str:
    result = services.run_command(principal, sandbox_id, command)
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.mark.docker
@pytest.mark.django_db
def test_real_pool_claims_isolated_sandboxes_and_refills(
    real_docker, pooled, as_alice, engine, settings
):
    services.refill_warm_pools(SYSTEM)
    assert len(pool_containers(engine)) == 2
    assert all(c.status == "running" for c in pool_containers(engine))

    started = time.perf_counter()
    first = services.create_sandbox(as_alice, cpus=0.5, memory_mb=256, env={"WHO": "first"})
    claim_seconds = time.perf_counter() - started
    second = services.create_sandbox(as_alice, memory_mb=128)
    for info in (first, second):
        assert Sandbox.objects.get(public_id=info.id).warm_container.status == "claimed"

    # Limits, name and network of the claimed container.
    container = engine.containers.get(f"sandhub-{first.id}")
    config = container.attrs["HostConfig"]
    assert (config["Memory"], config["MemorySwap"], config["NanoCpus"]) == (
        256 * 1024 * 1024,
        256 * 1024 * 1024,
        500_000_000,
    )
    assert config["PidsLimit"] == 256 and config["NetworkMode"] == "none"
    assert config["ReadonlyRootfs"] and config["CapDrop"] == ["ALL"]
    assert run(as_alice, first.id, "echo $WHO; id -u") == "first\n99999\n"
    cgroup_limit = run(as_alice, second.id, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
    assert int(cgroup_limit) == 128 * 1024 * 1024

    # No files and no processes shared between the two.
    run(as_alice, first.id, "echo secret > /workspace/mine.txt; echo tmp > /tmp/mine.txt")
    # (The pause lets the child redirect its output before the command ends: the exec wrapper
    # kills whatever still holds the command's output pipes.)
    run(as_alice, first.id, "nohup sleep 4242 >/dev/null 2>&1 & sleep 0.3")
    assert "sleep 4242" in run(as_alice, first.id, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    other = run(
        as_alice, second.id, "ls -A /workspace /tmp; cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
    )
    assert "mine.txt" not in other and "4242" not in other
    assert run(as_alice, first.id, "cat /workspace/mine.txt") == "secret\n"

    # Members never show as sandboxes; the pool refills; reconciliation keeps all of them.
    assert {s.id for s in services.list_sandboxes(as_alice)} == {first.id, second.id}
    services.refill_warm_pools(SYSTEM)
    assert len(ready_members()) == 2
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 0
    report = services.reconcile_hosts(SYSTEM)
    assert (report.removed, report.lost, report.stale_pool) == ([], [], [])
    assert len(pool_containers(engine)) == 4  # two claimed, two ready

    # Deleting removes a claimed container and its volume; a draining host loses its pool.
    for info in (first, second):
        member = Sandbox.objects.get(public_id=info.id).warm_container
        services.delete_sandbox(as_alice, info.id)
        assert engine.containers.list(all=True, filters={"name": f"sandhub-{info.id}"}) == []
        assert engine.volumes.list(filters={"name": f"sandhub-{member.pool_id}"}) == []
    real_docker.draining = True
    real_docker.save()
    services.refill_warm_pools(SYSTEM)
    assert pool_containers(engine) == [] and ready_members() == []
    assert claim_seconds < 2.0
