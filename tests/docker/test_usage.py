"""sample_usage on the real engine: the agent op, the per-command path (an image without
python3) and the engine's stats (the host side) agree with what the sandbox holds."""

from __future__ import annotations

from typing import Any

import pytest

from hosts.backends.docker import DockerBackend
from hosts.backends.usagescripts import parse_usage
from tests.docker.helpers import make_spec
from tests.usage_checks import MIB, check_usage, sh


def test_the_agent_reads_memory_cpu_pids_and_limits(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    check_usage(backend, sandbox, memory_mb=256, pids=128, cpus=1.0)
    assert backend.agents.running(sandbox)  # it was the agent that answered


def test_without_python3_the_per_command_path_reads_the_same_files(
    backend: DockerBackend, no_python_image: str
) -> None:
    state = backend.provision(make_spec(image_reference=no_python_image, cpus=0.5))
    try:
        sample = backend.sample_usage(state)
        assert not backend.agents.running(state)
        assert sample.memory_limit_bytes == 256 * MIB
        assert sample.cpu_limit == 0.5 and sample.pids_limit == 128
        assert sample.pids is not None and sample.pids >= 1
        assert sample.memory_bytes is not None and sample.cpu_seconds is not None
        assert sample.disk_used_bytes is not None
    finally:
        backend.destroy(state)


def test_the_engine_reads_the_container_from_outside(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    outside = backend.usage_from_host(sandbox)
    assert outside["memory_limit"] == 256 * MIB and outside["pids_limit"] == 128
    assert outside["cpu_limit"] == 1.0
    assert outside["memory"] > 0 and outside["cpu_usec"] >= 0 and outside["pids"] >= 1


def test_a_workspace_on_a_disk_of_its_own_reports_its_size(backend: DockerBackend) -> None:
    state = backend.provision(make_spec(disk_mb=64))
    try:
        sh(backend, state, "head -c 5000000 /dev/urandom > blob")
        sample = backend.sample_usage(state)
        limit = sample.disk_limit_bytes
        assert limit is not None and 40 * MIB < limit <= 64 * MIB, sample
        assert sample.disk_used_bytes is not None and sample.disk_used_bytes >= 5_000_000
    finally:
        backend.destroy(state)


def test_a_gone_sandbox_is_an_error(backend: DockerBackend) -> None:
    from hosts.backends.base import BackendError

    state = backend.provision(make_spec())
    backend.destroy(state)
    with pytest.raises(BackendError):
        backend.sample_usage(state)


def test_the_script_answer_parses_as_the_agent_op_answers() -> None:
    answer = parse_usage(
        "cgroup v2\nvisible 1\nmemory_raw 1000\ninactive 400\ncpu_usec 2500000\n"
        "cpu_max 50000 100000\nmemory_limit max\npids 3\npids_limit 64\ndisk_used 4096\n"
    )
    assert answer["memory"] == 600 and answer["memory_limit"] is None
    assert answer["cpu_limit"] == 0.5 and answer["cpu_usec"] == 2_500_000
    assert answer["pids"] == 3 and answer["pids_limit"] == 64 and answer["disk_used"] == 4096


def test_sampling_never_starts_an_agent_of_its_own(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    """An agent started to sample would stay in the sandbox, counted in the memory it reads."""
    assert not backend.agents.running(sandbox)
    sample = backend.sample_usage(sandbox)
    assert not backend.agents.running(sandbox)
    assert sample.memory_limit_bytes == 256 * MIB and sample.pids is not None
