"""DockerBackend's host side against the real engine: probes (pool members counted apart), an
unreachable engine, and TLS material on disk. Fixtures: tests/docker/conftest.py."""

from __future__ import annotations

import os
from typing import Any

import pytest

from hosts.backends.base import SandboxSpec
from hosts.backends.docker import DockerBackend
from hosts.models import Credential, Host
from tests.docker.helpers import RUN_PREFIX, make_spec
from tests.memory import MIB


def test_probe(backend: DockerBackend, spec: SandboxSpec, sandbox: dict[str, Any]) -> None:
    result = backend.probe()
    assert result.healthy, result.error
    assert result.sandboxes_running >= 1
    assert result.memory_percent is not None and 0 < result.memory_percent <= 100
    assert result.cpu_percent is not None and 0 < result.cpu_percent <= 100
    assert result.gpu_percent is None
    assert spec.sandbox_id in backend.list_sandbox_ids()


def test_probe_counts_claimed_pool_members_at_their_size_and_idle_ones_apart(
    backend: DockerBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle = backend.provision_pool_member(make_spec(memory_mb=256, cpus=1.0))
    member = backend.provision_pool_member(make_spec(memory_mb=256, cpus=1.0))
    plain = backend.provision(make_spec(memory_mb=128, cpus=0.5))
    states = [idle, member, plain]
    try:
        backend.claim_pool_member(member, make_spec(memory_mb=512, cpus=0.75))
        # Only this test's containers, whatever else runs on the engine meanwhile.
        api = backend.engine.api()
        listed, inspect = api.containers, api.inspect_container
        inspected: list[str] = []

        def ours(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            found = listed(*args, **kwargs)
            return [c for c in found if any(RUN_PREFIX in n for n in c["Names"])]

        def counting(container: str) -> dict[str, Any]:
            inspected.append(container)
            return inspect(container)

        monkeypatch.setattr(api, "containers", ours)
        monkeypatch.setattr(api, "inspect_container", counting)
        result = backend.probe()
    finally:
        monkeypatch.undo()
        for state in states:
            backend.destroy(state)
    assert result.healthy, result.error
    assert result.sandboxes_running == 2  # the plain sandbox and the claimed member
    assert result.details["memory_committed_bytes"] == (512 + 128) * MIB
    assert result.details["cpus_committed"] == 1.25
    assert result.details["pool_idle"] == 1
    assert result.details["pool_memory_bytes"] == 256 * MIB
    assert result.details["pool_cpus"] == 1.0
    assert inspected == [member["container_id"]]  # labels suffice for the others


def test_probe_of_an_unreachable_engine_does_not_raise() -> None:
    bogus = DockerBackend(Host(name="bogus", kind="docker", endpoint="unix:///nonexistent.sock"))
    result = bogus.probe()
    assert not result.healthy
    assert result.error
    bogus.close()


def test_tls_material_is_written_privately_and_removed() -> None:
    credential = Credential(name="tls", kind=Credential.Kind.DOCKER_TLS)
    credential.set_secret('{"ca": "CA PEM", "cert": "CERT PEM", "key": "KEY PEM"}')
    host = Host(name="tls", kind="docker", endpoint="tcp://127.0.0.1:9", credential=credential)
    tls_backend = DockerBackend(host)
    config = tls_backend.engine._tls_config()
    directory = tls_backend.engine._tls_dir
    assert directory and os.stat(directory).st_mode & 0o777 == 0o700
    assert config.cert is not None
    key_path = config.cert[1]
    with open(key_path) as handle:
        assert handle.read() == "KEY PEM"
    assert os.stat(key_path).st_mode & 0o777 == 0o600
    assert not tls_backend.probe().healthy  # nothing listens there; reported, not raised
    tls_backend.close()
    assert not os.path.exists(directory)
