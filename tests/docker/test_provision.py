"""DockerBackend's provisioning against the real engine and the real sandbox image: the
hardened container, network on request, pip on the read-only root, refusals, removal, status,
the workspace across a restart, and how long provisioning takes. Fixtures:
tests/docker/conftest.py; helpers: tests/docker/helpers.py."""

from __future__ import annotations

import io
import time
import zipfile
from typing import Any

import docker
import docker.errors
import pytest

from hosts.backends.base import BackendError, SandboxGone, SandboxSpec
from hosts.backends.docker import DockerBackend
from tests.docker.egress_helpers import egress_spec
from tests.docker.helpers import make_spec, make_tar, run
from tests.memory import MIB


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
    assert set(host_config["Tmpfs"]) == {"/tmp", "/home/sandbox", "/run/sandhub"}
    assert "mode=0700" in host_config["Tmpfs"]["/run/sandhub"]  # background jobs' files
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
    spec = egress_spec(proxy_port=43128, dns_port=45353)  # network goes through the proxy
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
    # Stopped behind the platform's back (its engine restarted): the next call starts it.
    assert run(backend, sandbox, "echo back").stdout == b"back\n"
    assert backend.status(sandbox) == "running"
    # Stopped by the platform: stays stopped, calls are refused.
    backend.stop(sandbox)
    with pytest.raises(BackendError, match="not running"):
        run(backend, sandbox, "true")
    assert backend.status(sandbox) == "stopped"


def test_files_persist_in_workspace_across_a_restart(
    backend: DockerBackend, engine: docker.DockerClient, sandbox: dict[str, Any]
) -> None:
    run(backend, sandbox, "echo kept > /workspace/notes.txt; echo gone > /tmp/scratch")
    engine.containers.get(sandbox["container_id"]).restart(timeout=0)
    assert backend.status(sandbox) == "running"
    result = run(backend, sandbox, "cat /workspace/notes.txt; ls /tmp")
    assert result.stdout == b"kept\n"


def test_provision_timing(backend: DockerBackend) -> None:
    started = time.monotonic()
    state = backend.provision(make_spec())
    provisioned = time.monotonic() - started
    started = time.monotonic()
    backend.destroy(state)
    destroyed = time.monotonic() - started
    print(f"provision {provisioned * 1000:.0f} ms, destroy {destroyed * 1000:.0f} ms")
    assert provisioned < 10
