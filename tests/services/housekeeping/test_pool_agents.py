"""Agents kept in the warm pool's members (sandboxes/housekeeping/poolagents.py), on the real
Docker engine: a sandbox claimed from the pool answers its first command (and run_once its
one) through the agent this process already runs, without an engine exec; a member gone
unclaimed loses its agent; the limit holds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import docker
import pytest
from docker.api.container import ContainerApiMixin
from docker.api.exec_api import ExecApiMixin

from hosts.backends import get_backend
from hosts.backends.docker.agent import DockerAgentPlace
from sandboxes import services
from sandboxes.housekeeping import poolagents
from sandboxes.models import Sandbox, WarmContainer
from tenants.principal import Principal
from tests.engine import engine_cleaning_up

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"
SYSTEM = Principal.system()


@pytest.fixture(autouse=True)
def own_instance(settings) -> None:
    settings.SANDHUB_INSTANCE = INSTANCE


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    with engine_cleaning_up(INSTANCE) as client:
        yield client


@pytest.fixture
def pooled(image, real_docker, engine):
    image.warm_pool_size = 2
    image.save()
    services.refill_warm_pools(SYSTEM)
    yield image
    image.warm_pool_size = 0  # what is left of the pool goes with the test
    image.save()
    services.refill_warm_pools(SYSTEM)


@pytest.fixture
def keeper(monkeypatch: pytest.MonkeyPatch) -> Iterator[poolagents.PoolAgents]:
    """This process as a web process: its keeper, looked through by the test (no thread)."""
    kept = poolagents.PoolAgents(limit=10)
    monkeypatch.setattr(poolagents, "_keeper", kept)
    yield kept


@pytest.fixture
def engine_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The containers the engine was asked to exec in, and those an agent was started in."""
    seen: dict[str, list[str]] = {"exec": [], "agent": [], "inspect": []}
    exec_create, start = ExecApiMixin.exec_create, DockerAgentPlace.start
    inspect = ContainerApiMixin.inspect_container

    def recording_inspect(self: Any, container: str) -> Any:
        seen["inspect"].append(container)
        return inspect(self, container)

    def recording_exec(self: Any, container: str, *args: Any, **kwargs: Any) -> Any:
        seen["exec"].append(container)
        return exec_create(self, container, *args, **kwargs)

    def recording_start(self: DockerAgentPlace, state: dict[str, Any]) -> Any:
        seen["agent"].append(state.get("container_id", ""))
        return start(self, state)

    monkeypatch.setattr(ExecApiMixin, "exec_create", recording_exec)
    monkeypatch.setattr(DockerAgentPlace, "start", recording_start)
    monkeypatch.setattr(ContainerApiMixin, "inspect_container", recording_inspect)
    return seen


def members() -> list[WarmContainer]:
    return list(WarmContainer.objects.filter(status="ready").select_related("host"))


def has_agent(member: WarmContainer) -> bool:
    return get_backend(member.host).has_agent(member.backend_state)


def test_the_first_command_after_a_claim_starts_no_agent(
    pooled, keeper, as_alice, engine_calls, engine
):
    keeper.look()
    assert len(members()) == 2 and all(has_agent(m) for m in members())
    assert keeper.warmed() == {m.pool_id for m in members()}
    for calls in engine_calls.values():
        calls.clear()

    info = services.create_sandbox(as_alice, memory_mb=256)
    sandbox = Sandbox.objects.get(public_id=info.id)
    container = sandbox.backend_state["container_id"]
    assert sandbox.warm_container.status == "claimed"
    # Claimed without an inspection (its agent here shows it runs), its limits applied.
    assert container not in engine_calls["inspect"]
    config = engine.api.inspect_container(container)["HostConfig"]
    assert (config["Memory"], config["MemorySwap"]) == (256 * 2**20, 256 * 2**20)
    # Before the command: this process holds the container's running agent already.
    assert get_backend(sandbox.host).has_agent(sandbox.backend_state)
    result = services.run_command(as_alice, info.id, "echo first; id -u")
    assert (result.exit_code, result.stdout) == (0, "first\n99999\n")
    assert container not in engine_calls["exec"] and engine_calls["agent"] == []
    services.delete_sandbox(as_alice, info.id)


def test_run_once_from_the_pool_runs_through_the_kept_agent(pooled, keeper, as_alice, engine_calls):
    keeper.look()
    kept = {m.backend_state["container_id"] for m in members()}
    engine_calls["exec"].clear()
    engine_calls["agent"].clear()
    result = services.run_once(as_alice, "echo once")
    assert result.result.stdout == "once\n" and result.deleted
    assert not kept & set(engine_calls["exec"]) and engine_calls["agent"] == []


def test_a_member_gone_unclaimed_loses_its_agent_and_the_limit_holds(
    pooled, monkeypatch: pytest.MonkeyPatch
):
    keeper = poolagents.PoolAgents(limit=1)
    keeper.look()
    first, second = members()
    assert [has_agent(first), has_agent(second)].count(True) == 1
    kept = first if has_agent(first) else second
    pooled.warm_pool_size = 0  # both members are trimmed
    pooled.save()
    services.refill_warm_pools(SYSTEM)
    keeper.look()
    link = get_backend(kept.host).agents  # type: ignore[attr-defined]
    assert kept.backend_state["container_id"] not in link._agents
    assert keeper.warmed() == frozenset()
