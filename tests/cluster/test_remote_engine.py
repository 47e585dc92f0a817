"""The Docker backend end to end on a remote engine (a second dockerd on TCP with TLS, added
with add_host): a sandbox's whole life through the services, with the remote engine's limits
(no network, no disk limit) refused or stated; reconciliation of what is left there."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from hosts.backends import get_backend
from hosts.backends.base import BackendError
from hosts.models import Host
from sandboxes import services
from sandboxes.contract.results import UploadFile
from sandboxes.models import Sandbox
from tenants.principal import Principal
from tests.cluster.dockerd2 import SecondEngine
from tests.cluster.remote import containers, host_of, platform_on, status_on, wait_for
from tests.docker.egress_helpers import egress_spec
from tests.previews.helpers import ask

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


@pytest.fixture
def remote(image: object, second_engine: SecondEngine) -> Iterator[Host]:
    with platform_on(second_engine) as host:
        yield host


@pytest.fixture
def platform() -> Principal:
    return Principal.system(None)


@pytest.fixture
def engine2(second_engine: SecondEngine) -> Iterator[docker.DockerClient]:
    with contextlib.closing(second_engine.client()) as client:
        yield client


def test_probe_is_healthy_with_the_engines_capacity(remote: Host, platform) -> None:
    info = services.probe_host(platform, remote.pk)
    assert info.healthy and 0.0 <= info.idle_score <= 1.0
    details = get_backend(remote).probe().details
    assert info.cpu_percent is not None and info.memory_percent is not None
    assert details["server_version"].startswith("20.10")
    assert details["ncpu"] >= 1 and details["mem_total_bytes"] > 0
    assert "none: /workspace is a plain volume" in details["disk_limit"]
    assert "network sandboxes are refused" in details["network_isolation"]


def test_a_sandboxs_life_on_the_remote_engine(remote, as_alice, engine2, tmp_path: Path) -> None:
    info = services.create_sandbox(as_alice, name="far", memory_mb=256)
    assert info.host == "engine-2" and status_on(engine2, info.id) == "running"
    assert containers(docker.from_env(), info.id) == []  # not on the local engine

    echo = services.run_command(as_alice, info.id, "echo hello from $(whoami)")
    assert (echo.exit_code, echo.stdout) == (0, "hello from sandbox\n")

    binary = bytes(range(256)) * 400
    services.upload_files(as_alice, info.id, [UploadFile("p/data.bin", binary),
                                              UploadFile("p/a.txt", b"a\n")])  # fmt: skip
    assert dict(services.download_files(as_alice, info.id, ["p"])) == {
        "/workspace/p/data.bin": binary, "/workspace/p/a.txt": b"a\n"
    }  # fmt: skip
    services.write_file(as_alice, info.id, "notes.txt", "kept\n")

    job = services.start_background(as_alice, info.id, "echo begin; sleep 0.5; echo end")
    done = wait_for(
        lambda: (c := services.check_background(as_alice, info.id, job.id)).running is False and c,
        30,
        "the background job's end",
    )
    assert (done.status, done.exit_code, done.output) == ("succeeded", 0, "begin\nend\n")

    stopped = services.stop_sandbox(as_alice, info.id)
    assert stopped.sandbox.status == "stopped" and status_on(engine2, info.id) == "exited"
    read = services.read_file(as_alice, info.id, "notes.txt")  # starts it again
    assert read.content == b"kept\n" and status_on(engine2, info.id) == "running"

    services.delete_sandbox(as_alice, info.id)
    assert containers(engine2, info.id) == []
    assert [v for v in engine2.volumes.list() if info.id in v.name] == []


def test_a_preview_streams_from_the_remote_engine(remote, as_alice) -> None:
    info = services.create_sandbox(as_alice, memory_mb=256)
    services.write_file(as_alice, info.id, "site/index.html", "remote page\n")
    app = services.deploy_app(
        as_alice, info.id, command="cd site && python3 -m http.server 8000", port=8000
    )
    grant = services.authorize_preview(ask(info.id, 8000, token=app.token))
    with services.open_preview_stream(grant, timeout=10) as stream:
        stream.write(b"GET /index.html HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
        stream.close_write()
        answer = b""
        while chunk := stream.read(65536, timeout=10):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"remote page\n")
    services.delete_sandbox(as_alice, info.id)


def test_a_snapshot_on_the_remote_engine_is_a_tar_and_restores(
    remote, as_alice, settings, tmp_path: Path
) -> None:
    settings.SANDHUB_SNAPSHOT_DIR = tmp_path / "snapshots"
    info = services.create_sandbox(as_alice, memory_mb=256)
    services.write_file(as_alice, info.id, "proj/main.py", "print('from the snapshot')\n")
    snap = services.snapshot_sandbox(as_alice, info.id, "remote")
    made = services.create_sandbox(as_alice, snapshot=snap.id)
    assert host_of(made.id) == "engine-2"
    run = services.run_command(as_alice, made.id, "python3 proj/main.py")
    assert run.stdout == "from the snapshot\n"
    for sandbox_id in (info.id, made.id):
        services.delete_sandbox(as_alice, sandbox_id)
    services.delete_snapshot(as_alice, snap.id)


def test_network_is_refused_there_clearly(remote: Host) -> None:
    backend = get_backend(remote)
    spec = egress_spec(3128, 53)
    with pytest.raises(BackendError, match="egress proxy and its firewall live on this machine"):
        backend.provision(spec)
    assert backend.containers.list_managed() == []


def test_reconciliation_removes_a_container_left_on_the_remote_engine(
    remote, as_alice, engine2, platform, settings
) -> None:
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 0
    info = services.create_sandbox(as_alice, memory_mb=256)
    Sandbox.objects.filter(public_id=info.id).delete()  # the platform forgot it
    assert status_on(engine2, info.id) == "running"
    services.reconcile_hosts(platform)
    assert containers(engine2, info.id) == []
    assert [v for v in engine2.volumes.list() if info.id in v.name] == []
