"""Placement over two engines, the local one (unix socket) and the second dockerd (TCP with
TLS), both added with add_host: new sandboxes go to both, by idle score."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from django.core.management import call_command

from hosts.backends import get_backend
from hosts.models import Host
from sandboxes import services
from sandboxes.models import Sandbox
from tenants.principal import Principal
from tests.cluster.dockerd2 import SecondEngine
from tests.cluster.remote import platform_on
from tests.engine import engine_cleaning_up

pytestmark = [pytest.mark.docker, pytest.mark.django_db]
INSTANCE = "cluster-placement"


@pytest.fixture
def both(image: object, second_engine: SecondEngine, settings) -> Iterator[list[Host]]:
    settings.SANDHUB_INSTANCE = INSTANCE
    with engine_cleaning_up(INSTANCE), platform_on(second_engine) as remote:
        call_command("add_host", "local", settings.SANDHUB_DOCKER_URL, stdout=io.StringIO())
        yield [Host.objects.get(name="local"), remote]


def test_a_burst_of_sandboxes_goes_to_both_engines_by_idle_score(both, as_alice, team_a) -> None:
    """Between two probes: the idlest engine takes sandboxes until its score, debited for
    each, comes down to the other's; then they alternate."""
    team_a.max_running_sandboxes = 10
    team_a.save()
    Host.objects.update(max_sandboxes=10)
    Host.objects.filter(name="local").update(idle_score=0.9)  # as the last probes said
    Host.objects.filter(name="engine-2").update(idle_score=1.0)
    made = [services.create_sandbox(as_alice, memory_mb=128, cpus=0.25) for _ in range(4)]
    assert [m.host for m in made] == ["engine-2", "local", "engine-2", "local"]
    scores = dict(Host.objects.values_list("name", "idle_score"))
    assert scores == pytest.approx({"engine-2": 0.8, "local": 0.7})

    # The next probe measures what is there: engine-2's two sandboxes (and nothing else).
    # All hosts at once, as the schedule does: the probe threads make no query (the TLS
    # credential is read before), so they see this test's uncommitted rows.
    services.probe_all_hosts(Principal.system(None))
    remote = Host.objects.get(name="engine-2")
    assert remote.cpu_percent == pytest.approx(0.5 / remote_cpus(both[1]) * 100)
    assert remote.idle_score == pytest.approx(1 - remote.cpu_percent / 100, abs=0.01)
    for sandbox in made:
        services.delete_sandbox(as_alice, sandbox.id)
    assert not Sandbox.objects.exclude(status="deleted").exists()


def remote_cpus(host: Host) -> int:
    return int(get_backend(host).probe().details["ncpu"])
