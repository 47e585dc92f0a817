"""Where a sandbox goes: SSH hosts only with a pinned key, a host that cannot isolate its
sandboxes (no per-sandbox users, namespaces or whole-sandbox limits) only for its own team,
GPUs on the host whose freest GPUs are freest. The in-memory backend stands in for both kinds
(the SSH backend itself is proven against a real sshd elsewhere)."""

from __future__ import annotations

import pytest

from hosts.backends import reset_backends
from hosts.backends.ssh.probes import GpuUse
from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NoCapacity
from sandboxes.models import Sandbox
from sandboxes.policy import placement

PINNED = "SHA256:" + "A" * 43


def gpu(index: int, utilization: float = 0.0, used: int = 0) -> dict:
    return GpuUse(
        index=index,
        name="H100",
        utilization_percent=utilization,
        memory_used_mib=used,
        memory_total_mib=81559,
    ).as_dict()


@pytest.fixture
def both_kinds(fake_backend, settings, docker_host):
    settings.SANDHUB_BACKENDS = {
        "docker": "tests.fakes.FakeBackend",
        "ssh": "tests.fakes.FakeBackend",
    }
    reset_backends()
    Host.objects.filter(pk=docker_host.pk).update(enabled=False)  # only SSH hosts below
    yield
    reset_backends()


def ssh_host(name: str, **fields) -> Host:
    values = {
        "kind": "ssh",
        "endpoint": "127.0.0.1:22",
        "host_key_pinned": PINNED,
        "per_sandbox_users": True,
        "isolated": True,
        **fields,
    }
    return Host.objects.create(name=name, **values)


def test_an_ssh_host_is_used_only_once_its_key_is_pinned(both_kinds, team_a):
    ssh_host("box", host_key_pinned="")
    with pytest.raises(NoCapacity):
        placement.choose_host(team_a)
    Host.objects.filter(name="box").update(host_key_pinned=PINNED)
    assert placement.choose_host(team_a).host.name == "box"


@pytest.mark.parametrize(
    "fields",
    [
        {"per_sandbox_users": False, "isolated": False},
        # Users of their own, but no namespaces or whole-sandbox limits.
        {"isolated": False, "isolation_missing": "bubblewrap (bwrap) is not installed"},
    ],
    ids=["shared-user", "not-isolated"],
)
def test_a_host_that_cannot_isolate_serves_only_its_own_team(both_kinds, team_a, team_b, fields):
    ssh_host("box", **fields)  # shared by every team: nobody's
    for team in (team_a, team_b):
        with pytest.raises(NoCapacity):
            placement.choose_host(team)
    Host.objects.filter(name="box").update(team=team_a)
    assert placement.choose_host(team_a).host.name == "box"
    with pytest.raises(NoCapacity):
        placement.choose_host(team_b)


def test_an_isolated_host_is_shared_by_every_team_or_private_to_one(both_kinds, team_a, team_b):
    ssh_host("box")
    for team in (team_a, team_b):
        assert placement.choose_host(team).host.name == "box"
    Host.objects.filter(name="box").update(team=team_b)
    assert placement.choose_host(team_b).host.name == "box"
    with pytest.raises(NoCapacity):
        placement.choose_host(team_a)


def test_gpus_go_to_the_host_whose_gpus_are_freest(both_kinds, team_a, as_alice):
    ssh_host("busy", gpu_count=2, gpus=[gpu(0, 90, 60000), gpu(1, 80, 50000)], idle_score=0.9)
    ssh_host("idle", gpu_count=2, gpus=[gpu(0, 70, 9000), gpu(1, 0, 0)], idle_score=0.2)
    chosen = placement.choose_host(team_a, 1)
    assert (chosen.host.name, chosen.gpus) == ("idle", (1,))
    first = services.create_sandbox(as_alice, gpus=1)
    row = Sandbox.objects.get(public_id=first.id)
    assert row.host.name == "idle" and row.gpus == [1]
    assert row.env["CUDA_VISIBLE_DEVICES"] == "1" and row.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # GPU 1 is taken now: the next one gets the idle host's other GPU before the busy host's.
    second = services.create_sandbox(as_alice, gpus=1)
    assert Sandbox.objects.get(public_id=second.id).gpus == [0]
    # A sandbox without GPUs on a GPU host sees none of them.
    plain = Sandbox.objects.get(public_id=services.create_sandbox(as_alice).id)
    assert plain.gpus == [] and plain.env["CUDA_VISIBLE_DEVICES"] == ""


def test_more_gpus_than_any_host_has_is_a_clear_refusal(both_kinds, team_a, as_alice):
    ssh_host("one-gpu", gpu_count=1, gpus=[gpu(0)])
    with pytest.raises(NoCapacity, match="no host of yours has 9 GPUs .the most any has is 1."):
        services.create_sandbox(as_alice, gpus=9)
    with pytest.raises(InvalidInput, match="gpus must be at most 16"):
        services.create_sandbox(as_alice, gpus=17)
    assert not Sandbox.objects.exists()


def test_gpu_use_is_listed_per_host(both_kinds, as_alice):
    ssh_host("one-gpu", gpu_count=1, gpus=[gpu(0, 14, 22131)])
    (host,) = [h for h in services.list_hosts(as_alice) if h.name == "one-gpu"]
    (only,) = host.gpus
    assert (only.index, only.utilization_percent, only.memory_used_mib) == (0, 14, 22131)
    assert only.busy_percent == pytest.approx(27.1, abs=0.1)
