"""DockerBackend against the real engine and the real sandbox image: provisioning here, and
the fixtures and helpers test_docker_exec.py, test_docker_files.py and test_docker_probe.py
(and the agent's tests) share.

These tests need the Docker engine at SANDHUB_TEST_DOCKER_URL (default: the local socket) and
the image sandhub/sandbox:latest built there. If either is missing they fail, loudly: a
backend that was never exercised must not pass CI by skipping.

No database is needed: the Host is never saved.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest

from hosts.backends.base import (
    BackendError,
    ExecResult,
    SandboxGone,
    SandboxSpec,
)
from hosts.backends.docker import DockerBackend
from hosts.models import Host

pytestmark = pytest.mark.docker

ENDPOINT = os.environ.get("SANDHUB_TEST_DOCKER_URL", "unix:///var/run/docker.sock")
IMAGE = os.environ.get("SANDHUB_TEST_IMAGE", "sandhub/sandbox:latest")
# Unique per run, so the safety net below only ever removes what this run created.
RUN_PREFIX = f"pytest-{uuid.uuid4().hex[:6]}-"
MIB = 1024 * 1024


# --- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    """A plain SDK client, to look at what the backend did from the outside."""
    try:
        client = docker.DockerClient(base_url=ENDPOINT, timeout=60)
        client.ping()
    except Exception as exc:
        pytest.fail(f"these tests need a Docker engine at {ENDPOINT}: {exc}")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"these tests need the image {IMAGE}: build it from images/sandbox")
    yield client
    _remove_leftovers(client)
    client.close()


def _remove_leftovers(client: docker.DockerClient) -> None:
    """Safety net: whatever a failed test left behind from this run."""
    name = f"sandhub-{RUN_PREFIX}"
    labels = {
        c.labels.get("org.sandhub.sandbox", "")
        for c in client.containers.list(all=True, filters={"name": name})
    }
    labels |= {v.name.removeprefix("sandhub-") for v in client.volumes.list(filters={"name": name})}
    # destroy removes everything a sandbox has: container, volume, network, disk image.
    cleaner = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))
    for label in labels - {""}:
        with contextlib.suppress(Exception):
            cleaner.destroy({"sandbox_id": label})
    cleaner.close()


@pytest.fixture(scope="module")
def backend(engine: docker.DockerClient) -> Iterator[DockerBackend]:
    instance = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))
    yield instance
    instance.close()


def make_spec(**overrides: Any) -> SandboxSpec:
    values: dict[str, Any] = {
        "sandbox_id": RUN_PREFIX + uuid.uuid4().hex[:8],
        "image_reference": IMAGE,
        "cpus": 1.0,
        "memory_mb": 256,
        "pids_limit": 128,
        "network": False,
        "env": {"SANDHUB_TEST": "yes"},
        "labels": {"org.sandhub.test": "1"},
    }
    values.update(overrides)
    return SandboxSpec(**values)


@pytest.fixture
def spec() -> SandboxSpec:
    return make_spec()


@pytest.fixture
def sandbox(backend: DockerBackend, spec: SandboxSpec) -> Iterator[dict[str, Any]]:
    state = backend.provision(spec)
    try:
        yield state
    finally:
        backend.destroy(state)


def run(
    backend: DockerBackend,
    state: dict[str, Any],
    script: str,
    *,
    timeout: float = 30,
    output_cap: int = MIB,
    **kwargs: Any,
) -> ExecResult:
    return backend.exec(
        state,
        ["bash", "-c", script],
        cwd="/workspace",
        env=kwargs.pop("env", {}),
        timeout=timeout,
        output_cap=output_cap,
        **kwargs,
    )


def processes(backend: DockerBackend, state: dict[str, Any]) -> str:
    return run(backend, state, "ps -eo pid,pgid,args").stdout.decode()


def make_tar(files: dict[str, tuple[bytes, int]], uid: int = 1000) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, (content, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(content), mode, time.time()
            info.uid = info.gid = uid
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def read_tar(chunks: Iterator[bytes]) -> dict[str, bytes]:
    result = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
        for member in archive.getmembers():
            if member.isfile():
                handle = archive.extractfile(member)
                assert handle is not None
                result[member.name] = handle.read()
    return result


# --- provisioning ------------------------------------------------------------------------------
def test_provision_hardens_the_container(
    backend: DockerBackend,
    engine: docker.DockerClient,
    spec: SandboxSpec,
    sandbox: dict[str, Any],
) -> None:
    name = f"sandhub-{spec.sandbox_id}"
    assert sandbox["container_name"] == name and sandbox["volume"] == name
    attrs = engine.containers.get(sandbox["container_id"]).attrs
    config, host_config = attrs["Config"], attrs["HostConfig"]
    assert config["User"] == "99999:99999"
    assert config["WorkingDir"] == "/workspace"
    assert "SANDHUB_TEST=yes" in config["Env"]
    assert config["Labels"]["org.sandhub.managed"] == "1"
    assert config["Labels"]["org.sandhub.sandbox"] == spec.sandbox_id
    assert config["Labels"]["org.sandhub.test"] == "1"
    assert host_config["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host_config["SecurityOpt"]
    assert host_config["ReadonlyRootfs"] is True
    assert host_config["Memory"] == 256 * MIB
    assert host_config["MemorySwap"] == 256 * MIB
    assert host_config["NanoCpus"] == 1_000_000_000
    assert host_config["PidsLimit"] == 128
    assert host_config["NetworkMode"] == "none"
    assert set(host_config["Tmpfs"]) == {"/tmp", "/home/sandbox"}
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts["/workspace"]["Type"] == "volume" and mounts["/workspace"]["Name"] == name
    assert backend.status(sandbox) == "running"

    result = run(
        backend,
        sandbox,
        "id -u; id -g; grep -E '^Cap(Eff|Prm)' /proc/self/status; "
        "grep NoNewPrivs /proc/self/status; ls /sys/class/net; "
        "touch /rootfs-write 2>&1 || echo rootfs-read-only; "
        "touch /tmp/t ~/h /workspace/w && echo writable",
    )
    lines = result.stdout.decode()
    assert result.exit_code == 0, result
    assert lines.startswith("99999\n99999\n")
    assert "CapPrm:\t0000000000000000" in lines and "CapEff:\t0000000000000000" in lines
    assert "NoNewPrivs:\t1" in lines
    assert "\nlo\n" in lines and "eth0" not in lines  # network none: loopback only
    assert "rootfs-read-only" in lines
    assert "writable" in lines


def test_network_on_request(backend: DockerBackend, engine: docker.DockerClient) -> None:
    spec = make_spec(network=True)
    state = backend.provision(spec)
    try:
        attrs = engine.containers.get(state["container_id"]).attrs
        assert attrs["HostConfig"]["NetworkMode"] == f"sandhub-{spec.sandbox_id}"
        assert "eth0" in run(backend, state, "ls /sys/class/net").stdout.decode()
    finally:
        backend.destroy(state)


def test_pip_user_install_works_on_the_read_only_rootfs(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    # A hand-made wheel (no network, no index): pip --user must land in the tmpfs home and
    # its console script in ~/.local/bin must be executable.
    wheel = io.BytesIO()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("sandhub_probe.py", "def main():\n    print('probe ok')\n")
        info = "sandhub_probe-0.1.dist-info/"
        archive.writestr(
            info + "METADATA", "Metadata-Version: 2.1\nName: sandhub-probe\nVersion: 0.1\n"
        )
        archive.writestr(
            info + "WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(
            info + "entry_points.txt", "[console_scripts]\nsandhub-probe = sandhub_probe:main\n"
        )
        archive.writestr(info + "RECORD", "")
    backend.put_files(
        sandbox,
        "/workspace/wheels",
        make_tar({"sandhub_probe-0.1-py3-none-any.whl": (wheel.getvalue(), 0o644)}),
    )
    result = run(
        backend,
        sandbox,
        "pip install --user --no-index -q /workspace/wheels/sandhub_probe-0.1-py3-none-any.whl"
        " && ~/.local/bin/sandhub-probe",
        timeout=120,
    )
    assert result.exit_code == 0, result
    assert result.stdout.decode().strip().endswith("probe ok")


def test_unknown_image_fails_cleanly(backend: DockerBackend, engine: docker.DockerClient) -> None:
    spec = make_spec(image_reference="sandhub/does-not-exist:never")
    with pytest.raises(BackendError, match="sandhub/does-not-exist:never is not present"):
        backend.provision(spec)
    name = f"sandhub-{spec.sandbox_id}"
    assert engine.containers.list(all=True, filters={"name": name}) == []
    assert engine.volumes.list(filters={"name": name}) == []


def test_provision_refuses_an_existing_sandbox_without_touching_it(
    backend: DockerBackend, spec: SandboxSpec, sandbox: dict[str, Any]
) -> None:
    run(backend, sandbox, "echo keep > /workspace/keep")
    with pytest.raises(BackendError, match="already exists"):
        backend.provision(spec)
    assert run(backend, sandbox, "cat /workspace/keep").stdout == b"keep\n"


def test_destroy_removes_everything_and_is_idempotent(
    backend: DockerBackend, engine: docker.DockerClient
) -> None:
    state = backend.provision(make_spec())
    backend.destroy(state)
    assert backend.status(state) == "missing"
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(state["container_name"])
    with pytest.raises(docker.errors.NotFound):
        engine.volumes.get(state["volume"])
    backend.destroy(state)  # again: nothing left, no error
    with pytest.raises(SandboxGone):
        run(backend, state, "true")
    with pytest.raises(SandboxGone):
        list(backend.get_files(state, "/workspace"))


def test_status_of_a_stopped_sandbox(
    backend: DockerBackend, engine: docker.DockerClient, sandbox: dict[str, Any]
) -> None:
    engine.containers.get(sandbox["container_id"]).stop(timeout=0)
    assert backend.status(sandbox) == "stopped"
    with pytest.raises(BackendError, match="not running"):
        run(backend, sandbox, "true")


def test_files_persist_in_workspace_across_a_restart(
    backend: DockerBackend, engine: docker.DockerClient, sandbox: dict[str, Any]
) -> None:
    run(backend, sandbox, "echo kept > /workspace/notes.txt; echo gone > /tmp/scratch")
    engine.containers.get(sandbox["container_id"]).restart(timeout=0)
    assert backend.status(sandbox) == "running"
    result = run(backend, sandbox, "cat /workspace/notes.txt; ls /tmp")
    assert result.stdout == b"kept\n"


# --- memory of this process (test_docker_exec.py, test_agent.py) ------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> int:
    """Reset the peak (VmHWM) if the kernel lets us; return the baseline to compare with."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return _status_kb("VmRSS")
    except OSError:
        return _status_kb("VmHWM")


def _peak_rss() -> int:
    return _status_kb("VmHWM")
