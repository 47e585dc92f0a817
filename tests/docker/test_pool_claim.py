"""Claiming a warm-pool member on the real engine: the sandbox's limits are applied only
when the member does not have them already (the engine's update call is ~15 ms of a claim),
and the container ends up with exactly the sandbox's limits either way."""

from __future__ import annotations

from typing import Any

import pytest

from hosts.backends.base import SandboxGone
from hosts.backends.docker import DockerBackend
from hosts.backends.docker.pool import Pool
from tests.docker.helpers import make_spec
from tests.memory import MIB


def limits_of(engine: Any, state: dict[str, Any]) -> tuple[int, int, int, int]:
    config = engine.api.inspect_container(state["container_id"])["HostConfig"]
    return config["Memory"], config["MemorySwap"], config["NanoCpus"], config["PidsLimit"]


@pytest.fixture
def updates(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, int]]:
    """The limits each claim posted to the engine's update endpoint."""
    posted: list[dict[str, int]] = []
    update = Pool._update_limits

    def recording(self: Pool, api: Any, container: str, body: dict[str, int]) -> None:
        posted.append(body)
        update(self, api, container, body)

    monkeypatch.setattr(Pool, "_update_limits", recording)
    return posted


def test_a_member_with_the_sandboxs_limits_is_claimed_without_an_update(
    backend: DockerBackend,
    engine: Any,
    updates: list[dict[str, int]],
) -> None:
    member = backend.provision_pool_member(make_spec(memory_mb=256, cpus=1.0, pids_limit=128))
    try:
        claimed = backend.claim_pool_member(
            member, make_spec(memory_mb=256, cpus=1.0, pids_limit=128)
        )
        assert updates == []
        assert claimed["jobs_dir"] == "/run/sandhub/jobs"  # the member's jobs tmpfs goes along
        assert limits_of(engine, claimed) == (256 * MIB, 256 * MIB, 1_000_000_000, 128)
        assert engine.api.inspect_container(claimed["container_id"])["Name"].endswith(
            claimed["container_name"]
        )
    finally:
        backend.destroy(member)


@pytest.mark.parametrize(
    "changed",
    [{"memory_mb": 512}, {"cpus": 0.5}, {"pids_limit": 64}],
    ids=["memory", "cpus", "pids"],
)
def test_any_other_limit_is_applied_to_the_running_member(
    backend: DockerBackend,
    engine: Any,
    updates: list[dict[str, int]],
    changed: dict[str, Any],
) -> None:
    member = backend.provision_pool_member(make_spec(memory_mb=256, cpus=1.0, pids_limit=128))
    wanted = {"memory_mb": 256, "cpus": 1.0, "pids_limit": 128, **changed}
    try:
        claimed = backend.claim_pool_member(member, make_spec(**wanted))
        memory = wanted["memory_mb"] * MIB
        expected = (memory, memory, int(wanted["cpus"] * 1_000_000_000), wanted["pids_limit"])
        assert len(updates) == 1
        assert limits_of(engine, claimed) == expected
    finally:
        backend.destroy(member)


def test_a_stopped_member_is_refused_before_anything_changes(
    backend: DockerBackend,
    engine: Any,
    updates: list[dict[str, int]],
) -> None:
    member = backend.provision_pool_member(make_spec())
    try:
        engine.api.stop(member["container_id"], timeout=1)
        before = engine.api.inspect_container(member["container_id"])["Name"]
        with pytest.raises(SandboxGone, match="not running"):
            backend.claim_pool_member(member, make_spec(memory_mb=512))
        assert updates == []
        assert engine.api.inspect_container(member["container_id"])["Name"] == before
    finally:
        backend.destroy(member)
