"""sample_usage of an SSH sandbox that is not isolated (no sudo here: it runs as the login
user, in the login's cgroup): CPU, memory and pids are unknown rather than the login's, which
other sandboxes share; the workspace's disk is still read. Isolated ones: test_usage.py."""

from __future__ import annotations

import secrets

import pytest

from hosts.backends.base import SandboxSpec
from hosts.backends.ssh.backend import SshBackend
from tests.usage_checks import sh

pytestmark = pytest.mark.sshd


def test_a_shared_sandbox_reports_disk_only(plain_backend: SshBackend) -> None:
    spec = SandboxSpec(
        sandbox_id="sb_" + secrets.token_hex(6),
        image_reference="",
        cpus=1.0,
        memory_mb=256,
        pids_limit=128,
        network=False,
        env={},
    )
    state = plain_backend.provision(spec)
    try:
        assert not state.get("isolated")
        sh(plain_backend, state, "head -c 100000 /dev/urandom > blob")
        sample = plain_backend.sample_usage(state)
        assert sample.memory_bytes is None and sample.cpu_seconds is None and sample.pids is None
        assert sample.memory_limit_bytes is None and sample.pids_limit is None
        assert sample.disk_used_bytes is not None and sample.disk_used_bytes >= 100000
    finally:
        plain_backend.destroy(state)
