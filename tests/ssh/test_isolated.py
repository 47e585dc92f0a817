"""An isolated sandbox on a real sshd with real sudo (isolation.py): the agent, the
per-command path and transfers run inside its namespaces, cgroup and disk; destroy leaves
nothing of it on the host."""

from __future__ import annotations

import os
import subprocess
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from hosts.backends.base import SandboxSpec
from hosts.backends.ssh.backend import SshBackend
from tests.ssh.helpers import make_backend
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd


@pytest.fixture
def backend(sshd: Sshd, base_dir: str, sudo_for_test_user: None) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=True, name="iso-box")
    yield ssh
    ssh.close()


def spec(**changes: Any) -> SandboxSpec:
    values: dict[str, Any] = {
        "sandbox_id": "sb_" + secrets.token_hex(6),
        "image_reference": "",
        "cpus": 1.0,
        "memory_mb": 256,
        "pids_limit": 128,
        "network": False,
        "env": {"SECRET_OF_THE_SANDBOX": "s3cr3t-" + secrets.token_hex(4)},
        "disk_mb": 64,
    }
    values.update(changes)
    return SandboxSpec(**values)


def run(backend: SshBackend, state: dict[str, Any], script: str) -> str:
    result = backend.exec(
        state, ["sh", "-c", script], cwd="/workspace", env={}, timeout=30, output_cap=1 << 20
    )
    assert result.exit_code == 0, result.stderr.decode()
    return result.stdout.decode()


def test_an_isolated_sandbox_runs_in_namespaces_of_its_own(backend: SshBackend) -> None:
    state = backend.provision(spec())
    try:
        assert state["isolated"] and state["uid"] > 0
        assert run(backend, state, "hostname").strip() == "sandbox"
        assert run(backend, state, "pwd").strip() == "/workspace"
        assert run(backend, state, "echo $SECRET_OF_THE_SANDBOX").strip().startswith("s3cr3t-")
        pids = run(backend, state, "ls /proc | grep -c '^[0-9]'")
        assert int(pids) < 10, pids
        assert run(backend, state, "cat /proc/net/dev | tail -n +3 | cut -d: -f1").split() == ["lo"]
        run(backend, state, "echo hello > /workspace/a.txt")
        assert run(backend, state, "cat a.txt") == "hello\n"
        df = run(backend, state, "df -m /workspace | tail -1")
        assert int(df.split()[1]) <= 64, df
    finally:
        backend.destroy(state)
    assert not os.path.exists(state["dir"])


def test_network_on_is_user_mode_and_destroy_removes_its_rule(backend: SshBackend) -> None:
    state = backend.provision(spec(network=True))
    try:
        links = run(backend, state, "tail -n +3 /proc/net/dev | cut -d: -f1").split()
        assert sorted(links) == ["lo", "tap0"]
        rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True)
        assert f"--uid-owner {state['uid']} -j SANDHUB-EGRESS" in rules.stdout
    finally:
        backend.destroy(state)
    rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True)
    assert f"--uid-owner {state['uid']} " not in rules.stdout
    assert not os.path.exists(state["dir"])
