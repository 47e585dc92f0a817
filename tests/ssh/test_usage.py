"""sample_usage of an isolated sandbox on a real sshd: inside its cgroup namespace the agent
cannot tell which of the host's cgroups is its own (it says so), and the backend reads the
sandbox's cgroup over the host connection; the workspace is its loop disk."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from hosts.backends.agent.inside.usage import CGROUP_MOUNT
from hosts.backends.agentusage import usage_call
from hosts.backends.base import SandboxGone, SandboxSpec
from hosts.backends.ssh.backend import SshBackend
from tests.ssh.helpers import make_backend
from tests.ssh.sshd import Sshd
from tests.usage_checks import MIB, check_usage

pytestmark = pytest.mark.sshd


def spec() -> SandboxSpec:
    return SandboxSpec(
        sandbox_id="sb_" + secrets.token_hex(6),
        image_reference="",
        cpus=1.0,
        memory_mb=256,
        pids_limit=128,
        network=False,
        env={},
        disk_mb=64,
    )


@pytest.fixture(params=[True, False], ids=["agent", "per-command"])
def backend(
    request: pytest.FixtureRequest, sshd: Sshd, base_dir: str, sudo_for_test_user: None
) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=request.param, name="usage-box")
    yield ssh
    ssh.close()


def test_an_isolated_sandbox_reports_its_cgroup_and_disk(backend: SshBackend) -> None:
    state = backend.provision(spec())
    try:
        assert state["isolated"]
        check_usage(backend, state, memory_mb=256, pids=128, cpus=1.0)
        sample = backend.sample_usage(state)
        assert sample.disk_limit_bytes is not None and sample.disk_limit_bytes <= 64 * MIB
    finally:
        backend.destroy(state)


def test_the_agent_inside_says_it_cannot_see_its_cgroup(sshd: Sshd, base_dir: str) -> None:
    """Not the host's root cgroup taken for the sandbox's (the namespace shows "/")."""
    ssh = make_backend(sshd, base_dir, agent=True, name="usage-box")
    state = ssh.provision(spec())
    try:
        answer = ssh.agents.idempotent(state, lambda c: usage_call(c, "/workspace"))
        assert answer["visible"] is False, answer
        assert CGROUP_MOUNT == "/sys/fs/cgroup"
    finally:
        ssh.destroy(state)
        ssh.close()


def test_a_gone_sandbox_is_gone(sshd: Sshd, base_dir: str, sudo_for_test_user: None) -> None:
    ssh = make_backend(sshd, base_dir, agent=True, name="usage-box")
    state = ssh.provision(spec())
    ssh.destroy(state)
    try:
        with pytest.raises(SandboxGone):
            ssh.sample_usage(state)
    finally:
        ssh.close()
