"""Host probes (sandboxes/housekeeping/probes.py): the figures list_hosts shows, a host that
stops answering marked down, skipped by placement, and back when it answers again, and what an
SSH host's probe says about isolating its sandboxes, stored; on the in-memory backend, then a
real engine behind a proxy that can go silent, and a socket that does not exist. Fixtures:
tests/services/housekeeping/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hosts.backends import reset_backends
from hosts.backends.base import ProbeResult
from hosts.models import Host
from sandboxes import services, tasks
from sandboxes.contract.errors import NoCapacity
from sandboxes.housekeeping.probes import record_probe
from sandboxes.policy import placement
from tenants.models import AuditLog, Channel
from tests.engine import EngineProxy
from tests.fakes import FakeBackend
from tests.services.housekeeping.helpers import SYSTEM, audit_of

# --- in-memory backend -----------------------------------------------------------------------


def test_probes_store_figures_that_list_hosts_shows(fake_backend, as_alice):
    services.create_sandbox(as_alice)
    result = tasks.probe_hosts()
    assert result == {"local": {"healthy": True, "idle_score": 0.8}}
    [info] = services.list_hosts(as_alice)
    assert (info.healthy, info.cpu_percent, info.memory_percent, info.sandboxes_running) == (
        True,
        10.0,
        20.0,
        1,
    )
    assert info.last_probe_at is not None


def test_a_silent_host_is_marked_down_skipped_and_comes_back(fake_backend, as_alice, docker_host):
    FakeBackend.down_hosts.add("local")
    report = services.reconcile_hosts(SYSTEM)
    docker_host.refresh_from_db()
    assert report.down == ["local"]
    assert (docker_host.healthy, docker_host.idle_score) == (False, 0.0)
    assert "does not answer" in docker_host.last_error
    assert audit_of("host.down").channel == Channel.SYSTEM
    with pytest.raises(NoCapacity):
        services.create_sandbox(as_alice)

    FakeBackend.down_hosts.clear()
    services.probe_all_hosts(SYSTEM)
    docker_host.refresh_from_db()
    assert docker_host.healthy and docker_host.last_error == ""
    assert audit_of("host.up").target_id == str(docker_host.pk)
    assert services.create_sandbox(as_alice).status == "running"


@pytest.mark.django_db
def test_a_probe_stores_whether_an_ssh_host_isolates_its_sandboxes_and_why_not():
    host = Host.objects.create(name="gpu", kind="ssh", endpoint="127.0.0.1:22", isolated=True)
    reasons = ["bubblewrap (bwrap) is not installed", "no cgroup freezer"]

    def probed(**details) -> Host:
        record_probe(host, ProbeResult(healthy=True, details=details))
        host.refresh_from_db()
        return host

    probed(per_sandbox_users=True, isolated=False, isolation_missing=reasons)
    assert (host.per_sandbox_users, host.isolated) == (True, False)
    assert host.isolation_missing == "bubblewrap (bwrap) is not installed\nno cgroup freezer"
    assert (probed(per_sandbox_users=True, isolated=True, isolation_missing=[]).isolated,
            host.isolation_missing) == (True, "")  # fmt: skip
    probed()  # no facts (a Docker engine's probe, say): what the last one found stays
    assert host.isolated
    record_probe(host, ProbeResult(healthy=False, error="down"))
    host.refresh_from_db()
    assert host.isolated and not host.healthy
    # An older SSH probe, that does not say: not isolated, and nothing to show why.
    assert (probed(per_sandbox_users=True).isolated, host.isolation_missing) == (False, "")


# --- on the real Docker engine ---------------------------------------------------------------


@pytest.fixture
def proxy() -> Iterator[EngineProxy]:
    engine_proxy = EngineProxy()
    engine_proxy.start()
    yield engine_proxy
    engine_proxy.stop()


@pytest.mark.docker
@pytest.mark.django_db
def test_a_real_host_that_stops_answering_is_marked_down_skipped_and_comes_back(
    real_docker, proxy, team_a
):
    remote = Host.objects.create(
        name="remote", kind="docker", endpoint=f"tcp://127.0.0.1:{proxy.port}"
    )
    Host.objects.filter(pk=real_docker.pk).update(enabled=False)  # only `remote` may be chosen
    services.probe_all_hosts(SYSTEM)
    assert Host.objects.get(pk=remote.pk).healthy
    assert placement.choose_host(team_a).host == remote

    proxy.stop()
    assert services.reconcile_hosts(SYSTEM).down == ["remote"]
    remote.refresh_from_db()
    assert not remote.healthy and remote.last_error and remote.idle_score == 0.0
    with pytest.raises(NoCapacity):
        placement.choose_host(team_a)
    Host.objects.filter(pk=real_docker.pk).update(enabled=True)
    assert placement.choose_host(team_a).host == real_docker  # new sandboxes go elsewhere

    proxy.start()  # the same port answers again
    services.probe_all_hosts(SYSTEM)
    remote.refresh_from_db()
    assert remote.healthy and remote.last_error == ""
    assert [r.action for r in AuditLog.objects.order_by("id")] == ["host.down", "host.up"]


@pytest.mark.docker
@pytest.mark.django_db
def test_a_host_whose_socket_does_not_exist_is_down(real_docker):
    gone = Host.objects.create(name="gone", kind="docker", endpoint="unix:///nonexistent.sock")
    reset_backends()
    services.probe_all_hosts(SYSTEM)
    gone.refresh_from_db()
    assert not gone.healthy and "nonexistent.sock" in gone.last_error
    assert Host.objects.get(pk=real_docker.pk).healthy
