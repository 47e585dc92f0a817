"""Snapshots on the real Docker engine (hosts/backends/docker/snapshots.py): what a sandbox's
snapshot holds (its workspace and its home; its writable layer is empty, so a commit would
hold nothing), a sandbox started from one, a snapshot moved to another host as a tar stream in
bounded memory, and a command that runs on through a snapshot."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import pytest

from hosts.backends.base import BackendError, SandboxSpec
from hosts.backends.docker import DockerBackend
from hosts.models import Host
from tests.docker.helpers import ENDPOINT, make_spec, run
from tests.memory import MIB, peak_rss, reset_peak_rss

LABELS = {"org.sandhub.instance": "docker-snapshot-test"}
# A module in the user's site-packages: what `pip install --user` leaves, without an index.
INSTALL = (
    'site=$(python3 -m site --user-site) && mkdir -p "$site" && '
    "echo 'ANSWER = 42' > \"$site/snapmod.py\""
)


@pytest.fixture(autouse=True)
def snapshot_dir(settings, tmp_path: Path) -> Path:
    settings.SANDHUB_SNAPSHOT_DIR = tmp_path / "snapshots"
    return settings.SANDHUB_SNAPSHOT_DIR


@pytest.fixture
def made(backend: DockerBackend) -> Iterator[list[dict[str, Any]]]:
    """Sandboxes a test starts (destroyed after it)."""
    states: list[dict[str, Any]] = []
    yield states
    for state in states:
        backend.destroy(state)


def start(backend: DockerBackend, made: list[dict[str, Any]], spec: SandboxSpec) -> dict:
    made.append(backend.provision(spec))
    return made[-1]


def out(backend: DockerBackend, state: dict[str, Any], script: str) -> str:
    result = run(backend, state, script)
    assert result.exit_code == 0, result.stderr.decode()
    return result.stdout.decode()


def snapshot_id() -> str:
    return "snap_" + make_spec().sandbox_id[-8:].replace("-", "0")


def test_the_writable_layer_holds_nothing_so_a_commit_would_keep_nothing(
    backend: DockerBackend, made: list[dict[str, Any]], engine: docker.DockerClient
) -> None:
    """Why a snapshot is not a `docker commit`: the root is read-only, the sandbox writes
    only into its volume and its tmpfs mounts, and none of that is in the container's layer."""
    state = start(backend, made, make_spec(disk_mb=64))
    said = run(backend, state, "touch /usr/local/x /etc/x /x 2>&1; " + INSTALL).stdout.decode()
    assert said.count("Read-only file system") == 3, said
    assert engine.api.diff(state["container_id"]) is None  # `docker diff`: nothing changed


def test_a_sandbox_from_a_snapshot_has_the_workspace_and_the_installed_package(
    backend: DockerBackend, made: list[dict[str, Any]], snapshot_dir: Path
) -> None:
    source = start(backend, made, make_spec(disk_mb=64))
    out(backend, source, "mkdir -p src && echo hello > src/a.txt && chmod 600 src/a.txt")
    out(backend, source, "head -c 3000000 /dev/urandom > big.bin && ln -s src/a.txt link")
    out(backend, source, INSTALL)
    digest = out(backend, source, "sha256sum big.bin")
    name = snapshot_id()
    taken = backend.snapshot(source, name, LABELS)
    assert taken.state["workspace"] == "image" and taken.state["disk_mb"] == 64
    assert 3_000_000 < taken.size_bytes < 40 * MIB  # the blocks used, not the disk's 64 MB
    assert sorted(p.name for p in (snapshot_dir / name).iterdir()) == [
        "home.tar",
        "meta.json",
        "workspace.img",
    ]
    assert oct((snapshot_dir / name).stat().st_mode & 0o777) == "0o700"
    # The source runs on, unpaused, and may change what the snapshot keeps as it was.
    out(backend, source, "echo changed > src/a.txt && rm big.bin")

    fork = start(backend, made, make_spec(disk_mb=64, snapshot=taken.state))
    assert out(backend, fork, "cat src/a.txt; stat -c '%a %u' src/a.txt") == "hello\n600 99999\n"
    assert out(backend, fork, "sha256sum big.bin") == digest
    assert out(backend, fork, "readlink link") == "src/a.txt\n"
    assert out(backend, fork, "python3 -c 'import snapmod; print(snapmod.ANSWER)'") == "42\n"
    assert out(backend, fork, "echo more > new.txt && df -m /workspace | tail -1").split()[1]
    assert out(backend, source, "cat src/a.txt") == "changed\n"

    backend.delete_snapshot(taken.state)
    assert not (snapshot_dir / name).exists()
    backend.delete_snapshot(taken.state)  # idempotent
    with pytest.raises(BackendError, match="gone"):
        backend.provision(make_spec(disk_mb=64, snapshot=taken.state))


def test_a_command_running_through_a_snapshot_goes_on_and_the_copy_is_consistent(
    backend: DockerBackend, made: list[dict[str, Any]]
) -> None:
    """The container is paused for the copy: the command stops where it is, then ends as
    it would have; the snapshot holds the lines written before the pause, every one whole."""
    source = start(backend, made, make_spec(disk_mb=64))
    script = "for i in $(seq 1 300); do echo line-$i >> count.txt; sleep 0.01; done; echo done"
    result: dict[str, Any] = {}
    writer = threading.Thread(target=lambda: result.update(r=run(backend, source, script)))
    writer.start()
    try:
        out(backend, source, "until [ -s count.txt ]; do sleep 0.01; done")
        taken = backend.snapshot(source, snapshot_id(), LABELS)
    finally:
        writer.join(timeout=60)
    assert result["r"].exit_code == 0 and result["r"].stdout == b"done\n"
    assert out(backend, source, "wc -l < count.txt") == "300\n"
    fork = start(backend, made, make_spec(disk_mb=64, snapshot=taken.state))
    lines = out(backend, fork, "cat count.txt").splitlines()
    assert 0 < len(lines) < 300
    assert lines == [f"line-{i}" for i in range(1, len(lines) + 1)]
    backend.delete_snapshot(taken.state)


def test_without_sandbox_disks_the_workspace_is_kept_as_a_tar(
    engine: docker.DockerClient, made: list[dict[str, Any]]
) -> None:
    """A remote engine's form (no disk of the platform's): forced with disk_limit=false."""
    plain = DockerBackend(
        Host(name="plain", kind="docker", endpoint=ENDPOINT, options={"disk_limit": False})
    )
    try:
        source = plain.provision(make_spec())
        made.append(source)
        out(plain, source, "mkdir -p d && echo kept > d/f.txt && " + INSTALL)
        taken = plain.snapshot(source, snapshot_id(), LABELS)
        assert taken.state["workspace"] == "tar"
        fork = plain.provision(make_spec(snapshot=taken.state))
        made.append(fork)
        assert out(plain, fork, "cat d/f.txt") == "kept\n"
        assert out(plain, fork, "python3 -c 'import snapmod; print(snapmod.ANSWER)'") == "42\n"
        plain.delete_snapshot(taken.state)
    finally:
        plain.close()


def test_a_snapshot_moves_to_another_host_as_a_stream_in_bounded_memory(
    backend: DockerBackend, made: list[dict[str, Any]], snapshot_dir: Path
) -> None:
    """A second host of the kind (here a second row for this same engine: the move is the
    same stream either way): export there, import here, start from the copy."""
    other = DockerBackend(Host(pk=10_000, name="other", kind="docker", endpoint=ENDPOINT))
    try:
        source = start(backend, made, make_spec(disk_mb=128))
        out(backend, source, "head -c 50000000 /dev/urandom > big.bin")
        digest = out(backend, source, "sha256sum big.bin")
        taken = backend.snapshot(source, snapshot_id(), LABELS)
        copy_id = snapshot_id()
        baseline = reset_peak_rss()
        stream = backend.export_snapshot(taken.state)
        try:
            copied = other.import_snapshot(copy_id, LABELS, stream)
        finally:
            stream.close()  # type: ignore[attr-defined]
        grown = peak_rss() - baseline
        print(f"a 50 MB snapshot moved between hosts: peak RSS grew {grown // 1024} kB")
        assert grown < 10 * MIB
        assert copied.state == {**taken.state, "snapshot_id": copy_id}
        assert copied.size_bytes < 2 * taken.size_bytes  # holes stay holes
        assert {r.label_id for r in other.list_managed() if r.kind == "snapshot"} == {copy_id}
        fork = other.provision(make_spec(disk_mb=128, snapshot=copied.state))
        made.append(fork)
        assert out(other, fork, "sha256sum big.bin") == digest
        other.delete_snapshot(copied.state)
        backend.delete_snapshot(taken.state)
        assert list(snapshot_dir.iterdir()) == []
    finally:
        other.close()


def test_a_disk_snapshot_keeps_its_size(backend: DockerBackend, made: list[dict[str, Any]]):
    source = start(backend, made, make_spec(disk_mb=64))
    taken = backend.snapshot(source, snapshot_id(), LABELS)
    try:
        with pytest.raises(BackendError, match="64 MB disk"):
            backend.provision(replace(make_spec(disk_mb=128), snapshot=taken.state))
    finally:
        backend.delete_snapshot(taken.state)
