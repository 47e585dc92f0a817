"""Auto-cleanup, host probes and reconciliation on the real Docker engine, and the sweep
schedule end to end in a real qcluster worker. Each test runs as this run's own Sandhub
instance (test_lifecycle.py's own_instance), so reconciliation never touches containers of
other deployments or test runs on the same engine."""

# ruff: noqa: F811  (pytest fixtures imported from tests/test_lifecycle.py)
from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import docker
import pytest
from django.utils import timezone
from django_q.models import Schedule, Success
from django_q.scheduler import scheduler

from hosts.backends import reset_backends
from hosts.backends.base import LABEL_INSTANCE
from hosts.models import Host
from sandboxes import placement, services, tasks
from sandboxes.errors import NoCapacity
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from tenants.models import AuditLog, Channel
from tests.engine import engine_cleaning_up
from tests.test_lifecycle import INSTANCE, LONG_AGO, SYSTEM, age, audit_of, status_of
from tests.test_lifecycle import own_instance as own_instance  # autouse fixture


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    with engine_cleaning_up(INSTANCE) as client:
        yield client


def engine_has(engine: docker.DockerClient, label_id: str) -> tuple[bool, bool]:
    """(a container, a volume) labelled with this sandbox or pool id exist."""
    selector = {"label": f"org.sandhub.sandbox={label_id}"}
    return (
        bool(engine.containers.list(all=True, filters=selector)),
        bool(engine.volumes.list(filters=selector)),
    )


@pytest.mark.docker
@pytest.mark.django_db
def test_real_sweep_removes_expired_and_idle_sandboxes_and_keeps_busy_ones(
    real_docker, as_alice, engine
):
    expired, idle, busy = (services.create_sandbox(as_alice, memory_mb=128).id for _ in range(3))
    age(expired, expires_at=timezone.now() - timedelta(seconds=1))
    for sandbox_id in (idle, busy):
        age(sandbox_id, last_activity_at=timezone.now() - LONG_AGO)
    CommandExecution.objects.create(
        sandbox=Sandbox.objects.get(public_id=busy),
        channel="mcp",
        command="python3 train.py",
        background=True,
        status=CommandStatus.RUNNING,
    )

    report = services.sweep_expired_and_idle(SYSTEM)

    assert (report.expired, report.idle, report.failed) == ([expired], [idle], {})
    assert engine_has(engine, expired) == (False, False)
    assert engine_has(engine, idle) == (False, False)
    assert engine_has(engine, busy) == (True, True)
    assert {r.action for r in AuditLog.objects.filter(channel=Channel.SYSTEM)} == {
        "sandbox.expire",
        "sandbox.idle",
    }
    services.delete_sandbox(as_alice, busy)
    assert engine_has(engine, busy) == (False, False)


@pytest.mark.docker
@pytest.mark.django_db
def test_real_reconcile_removes_orphans_and_finds_lost_sandboxes(
    real_docker, as_alice, engine, settings
):
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 0
    # An orphan: labelled as this deployment's sandbox, with a volume, and no Sandbox row.
    orphan_id = f"sb_orphan{uuid.uuid4().hex[:6]}"
    labels = {
        "org.sandhub.managed": "1",
        "org.sandhub.sandbox": orphan_id,
        LABEL_INSTANCE: INSTANCE,
    }
    engine.volumes.create(f"sandhub-{orphan_id}", labels=dict(labels))
    engine.containers.run(
        settings.SANDHUB_SANDBOX_IMAGE,
        name=f"sandhub-{orphan_id}",
        labels=labels,
        network_mode="none",
        volumes={f"sandhub-{orphan_id}": {"bind": "/workspace", "mode": "rw"}},
        detach=True,
    )
    # A sandbox whose container someone removed behind the platform's back (docker rm -f).
    vanished = services.create_sandbox(as_alice, memory_mb=128)
    engine.containers.get(f"sandhub-{vanished.id}").remove(force=True)
    kept = services.create_sandbox(as_alice, memory_mb=128)

    report = tasks.reconcile()

    assert report["removed"] == [orphan_id] and report["lost"] == [vanished.id]
    assert engine_has(engine, orphan_id) == (False, False)
    assert status_of(vanished.id) == "lost" and status_of(kept.id) == "running"
    assert engine_has(engine, kept.id) == (True, True)
    assert services.run_command(as_alice, kept.id, "echo still here").stdout == "still here\n"
    for sandbox_id in (vanished.id, kept.id):
        services.delete_sandbox(as_alice, sandbox_id)
    assert engine_has(engine, vanished.id) == (False, False)  # its volume went with it


class EngineProxy:
    """127.0.0.1:<port> forwarded to the engine's unix socket: a Docker host on TCP whose
    engine can stop answering (stop) and answer again (start), on the same port."""

    def __init__(self, socket_path: str = "/var/run/docker.sock") -> None:
        self.socket_path = socket_path
        self.port = 0
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.close()
        self._sockets.clear()
        self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.socket_path)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def proxy() -> Iterator[EngineProxy]:
    engine_proxy = EngineProxy()
    engine_proxy.start()
    yield engine_proxy
    engine_proxy.stop()


@pytest.mark.docker
@pytest.mark.django_db
def test_a_real_host_that_stops_answering_is_marked_down_skipped_and_comes_back(
    real_docker, proxy, team_a
):
    remote = Host.objects.create(
        name="remote", kind="docker", endpoint=f"tcp://127.0.0.1:{proxy.port}"
    )
    Host.objects.filter(pk=real_docker.pk).update(enabled=False)  # only `remote` may be chosen
    services.probe_all_hosts(SYSTEM)
    assert Host.objects.get(pk=remote.pk).healthy
    assert placement.choose_host(team_a).host == remote

    proxy.stop()
    assert services.reconcile_hosts(SYSTEM).down == ["remote"]
    remote.refresh_from_db()
    assert not remote.healthy and remote.last_error and remote.idle_score == 0.0
    with pytest.raises(NoCapacity):
        placement.choose_host(team_a)
    Host.objects.filter(pk=real_docker.pk).update(enabled=True)
    assert placement.choose_host(team_a).host == real_docker  # new sandboxes go elsewhere

    proxy.start()  # the same port answers again
    services.probe_all_hosts(SYSTEM)
    remote.refresh_from_db()
    assert remote.healthy and remote.last_error == ""
    assert [r.action for r in AuditLog.objects.order_by("id")] == ["host.down", "host.up"]


@pytest.mark.docker
@pytest.mark.django_db
def test_a_host_whose_socket_does_not_exist_is_down(real_docker):
    gone = Host.objects.create(name="gone", kind="docker", endpoint="unix:///nonexistent.sock")
    reset_backends()
    services.probe_all_hosts(SYSTEM)
    gone.refresh_from_db()
    assert not gone.healthy and "nonexistent.sock" in gone.last_error
    assert Host.objects.get(pk=real_docker.pk).healthy


# --- the schedule, end to end, in a real qcluster worker ----------------------------------------


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_a_real_qcluster_runs_the_sweep_schedule(real_docker, as_alice, engine, qcluster):
    """Schedule row -> django-q2 scheduler -> queued task -> worker process -> sweep.

    The cluster's own scheduler first looks 30 s after it starts; the test calls the same
    scheduler function once instead of waiting for it.
    """
    info = services.create_sandbox(as_alice, memory_mb=128)
    age(info.id, expires_at=timezone.now() - timedelta(seconds=1))
    Schedule.objects.filter(name="sandhub.sweep").update(
        next_run=timezone.now() - timedelta(seconds=1)
    )
    scheduler()

    # The worker deletes; then the cluster's monitor stores the task's result.
    done = Success.objects.filter(func="sandboxes.tasks.sweep")
    deadline = time.monotonic() + 20
    while not done.exists():
        assert time.monotonic() < deadline, qcluster.log_since_start()
        time.sleep(0.2)
    assert done.get().result["expired"] == [info.id]
    assert status_of(info.id) == "deleted"
    assert engine_has(engine, info.id) == (False, False)
    row = audit_of("sandbox.expire")
    assert (row.channel, row.target_id, row.outcome) == (Channel.SYSTEM, info.id, "ok")
    assert Schedule.objects.get(name="sandhub.sweep").next_run > timezone.now()
