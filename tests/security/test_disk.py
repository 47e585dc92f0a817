"""A disk limit per sandbox (issue 8, point 4) and a sandbox user that is no account of the host
(point 8), on the real Docker engine of this machine.

A full /workspace stops the sandbox's writes ("No space left on device"), costs the host no
more than the sandbox's disk size, and leaves the sandbox working; the platform removes the
filesystem with the sandbox, and reconciliation removes one left behind.
"""

from __future__ import annotations

import grp
import pwd
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from django.conf import settings

from hosts.backends import get_backend
from hosts.backends.base import LABEL_INSTANCE, SandboxSpec, Unsupported
from hosts.backends.docker import DockerBackend
from hosts.backends.docker.disk import DEFAULT_DISK_MB, disk_dir
from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import InvalidInput, QuotaExceeded
from sandboxes.housekeeping.reconcile import reconcile
from sandboxes.models import Sandbox
from tests.engine import EngineProxy, engine_cleaning_up

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def own_instance(settings):
    settings.SANDHUB_INSTANCE = INSTANCE


@pytest.fixture
def engine() -> Iterator[docker.DockerClient]:
    with engine_cleaning_up(INSTANCE) as client:
        yield client


def backend_of(host: Host) -> DockerBackend:
    backend = get_backend(host)
    assert isinstance(backend, DockerBackend)
    return backend


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as handle:
        return any(line.split()[4] == str(path) for line in handle)


def disk_files(name: str) -> list[Path]:
    base = disk_dir()
    return [p for p in (base / f"{name}.img", base / f"{name}.json", base / name) if p.exists()]


def spec(sandbox_id: str, **overrides) -> SandboxSpec:
    values = {
        "sandbox_id": sandbox_id,
        "image_reference": settings.SANDHUB_SANDBOX_IMAGE,
        "cpus": 1.0,
        "memory_mb": 128,
        "pids_limit": 128,
        "network": False,
        "labels": {LABEL_INSTANCE: INSTANCE},
    }
    return SandboxSpec(**{**values, **overrides})


# --- quota -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_disk_size_comes_from_the_team_quota(fake_backend, as_alice, team_a):
    assert team_a.max_disk_mb_per_sandbox == 5120
    default = services.create_sandbox(as_alice)
    assert default.disk_mb == 5120 == Sandbox.objects.get(public_id=default.id).disk_mb
    small = services.create_sandbox(as_alice, disk_mb=100)
    assert small.disk_mb == 100
    with pytest.raises(QuotaExceeded, match="5120 MB of disk"):
        services.create_sandbox(as_alice, disk_mb=5121)
    for wrong in (0, 63, "100", True, 1.5):
        with pytest.raises(InvalidInput, match="disk_mb"):
            services.create_sandbox(as_alice, disk_mb=wrong)


# --- the filesystem --------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.django_db
def test_a_full_workspace_stops_the_sandbox_not_the_host(real_docker, as_alice, engine):
    info = services.create_sandbox(as_alice, memory_mb=256, disk_mb=100)
    name = f"sandhub-{info.id}"
    image = disk_dir() / f"{name}.img"
    try:
        full = services.run_command(
            as_alice, info.id, "dd if=/dev/zero of=/workspace/fill bs=1M count=300", timeout=120
        )
        assert full.exit_code != 0
        assert "No space left on device" in full.stderr, full
        # The host spent at most the sandbox's size (a sparse file: only what was written).
        assert image.stat().st_size == 100 * MIB
        assert image.stat().st_blocks * 512 <= 101 * MIB
        # Still usable once the sandbox frees room.
        again = services.run_command(
            as_alice,
            info.id,
            "rm /workspace/fill && dd if=/dev/zero of=/workspace/again bs=1M count=10 "
            "2>/dev/null && stat -c %s /workspace/again && echo still here",
        )
        assert (again.exit_code, again.stdout) == (0, f"{10 * MIB}\nstill here\n"), again
    finally:
        services.delete_sandbox(as_alice, info.id)
    assert disk_files(name) == []
    assert not mounted(disk_dir() / name)


@pytest.mark.docker
@pytest.mark.django_db
def test_the_sandbox_user_is_no_account_of_the_host_and_owns_the_workspace(
    real_docker, as_alice, engine
):
    info = services.create_sandbox(as_alice, memory_mb=128)
    try:
        result = services.run_command(
            as_alice, info.id, "id -u; id -g; stat -c '%u %g' /workspace; touch /workspace/x"
        )
        assert result.exit_code == 0, result
        uid, gid, owner = result.stdout.splitlines()
        assert owner == f"{uid} {gid}"
        with pytest.raises(KeyError):
            pwd.getpwuid(int(uid))
        with pytest.raises(KeyError):
            grp.getgrgid(int(gid))
        attrs = engine.containers.get(f"sandhub-{info.id}").attrs
        assert attrs["Config"]["User"] == f"{uid}:{gid}"
    finally:
        services.delete_sandbox(as_alice, info.id)


@pytest.mark.docker
@pytest.mark.django_db
def test_reconciliation_removes_a_disk_left_behind(real_docker, engine, settings):
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 0
    backend = backend_of(real_docker)
    # An orphan sandbox (no row): container, volume and disk; and a disk alone (a platform
    # process that died between making the disk and the volume).
    orphan = f"sb_orphan{uuid.uuid4().hex[:6]}"
    backend.provision(spec(orphan, disk_mb=64))
    alone = f"sb_alone{uuid.uuid4().hex[:6]}"
    labels = {LABEL_INSTANCE: INSTANCE, "org.sandhub.sandbox": alone}
    backend.containers.disks.create(f"sandhub-{alone}", 64, labels)
    assert disk_files(f"sandhub-{orphan}") and disk_files(f"sandhub-{alone}")

    report = reconcile(hosts=[real_docker], grace=0)

    assert sorted(report.removed) == sorted([orphan, alone]), report
    for name in (f"sandhub-{orphan}", f"sandhub-{alone}"):
        assert disk_files(name) == []
        assert not mounted(disk_dir() / name)
    with pytest.raises(docker.errors.NotFound):
        engine.volumes.get(f"sandhub-{orphan}")


@pytest.mark.docker
@pytest.mark.django_db
def test_a_warm_pool_member_is_claimed_only_at_its_disk_size(real_docker, engine):
    backend = backend_of(real_docker)
    member = backend.provision_pool_member(spec(f"wp_{uuid.uuid4().hex[:10]}"))
    try:
        assert member["disk_mb"] == DEFAULT_DISK_MB
        with pytest.raises(Unsupported, match="provision afresh"):
            backend.claim_pool_member(member, spec(f"sb_{uuid.uuid4().hex[:10]}", disk_mb=200))
        claimed = backend.claim_pool_member(member, spec(f"sb_{uuid.uuid4().hex[:10]}"))
        result = backend.exec(
            claimed,
            ["df", "-k", "--output=size", "/workspace"],
            cwd="/workspace",
            env={},
            timeout=30,
            output_cap=MIB,
        )
        size_kb = int(result.stdout.split()[-1])
        assert DEFAULT_DISK_MB * 0.9 < size_kb / 1024 <= DEFAULT_DISK_MB
    finally:
        backend.destroy(member)
    assert disk_files(member["volume"]) == []


@pytest.mark.docker
def test_a_remote_engine_gets_a_plain_volume_and_says_so(engine):
    # The local engine reached over TCP: to the platform, an engine on another machine.
    proxy = EngineProxy()
    proxy.start()
    remote = DockerBackend(
        Host(name="remote", kind="docker", endpoint=f"tcp://127.0.0.1:{proxy.port}")
    )
    state: dict = {}
    try:
        details = remote.probe().details
        assert details["disk_limit"].startswith("none"), details
        assert "not installed" in details["network_isolation"], details
        state = remote.provision(spec(f"sb_{uuid.uuid4().hex[:10]}", disk_mb=64))
        assert state["disk_mb"] is None
        volume = engine.volumes.get(state["volume"])
        assert volume.attrs["Options"] in (None, {})
        assert disk_files(state["volume"]) == []
    finally:
        if state:
            remote.destroy(state)
        remote.close()
        proxy.stop()
