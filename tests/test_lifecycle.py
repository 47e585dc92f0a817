"""Auto-cleanup, host probes, reconciliation and the schedules that run them.

The first half runs on the in-memory backend (fast); the second on the real Docker engine.
Every test runs as its own Sandhub instance (SANDHUB_INSTANCE), so reconciliation here never
touches containers of other deployments or of other test runs on the same engine.
"""

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
from django.utils.module_loading import import_string
from django_q.models import Schedule, Success
from django_q.scheduler import scheduler

from hosts.backends import get_backend, reset_backends
from hosts.backends.base import LABEL_INSTANCE, SandboxSpec
from hosts.models import Host
from sandboxes import placement, schedules, services, tasks
from sandboxes.errors import NoCapacity, PermissionDenied
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from tenants.models import AuditLog, Channel
from tenants.principal import Principal
from tests.engine import engine_cleaning_up
from tests.fakes import FakeBackend
from tests.qcluster import qcluster  # noqa: F401  (fixture)

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"
SYSTEM = Principal.system()
LONG_AGO = timedelta(hours=5)


@pytest.fixture(autouse=True)
def own_instance(settings):
    settings.SANDHUB_INSTANCE = INSTANCE
    FakeBackend.down_hosts = set()
    FakeBackend.fail_claim = None
    yield
    FakeBackend.down_hosts = set()


def age(sandbox_id: str, **fields) -> None:
    Sandbox.objects.filter(public_id=sandbox_id).update(**fields)


def status_of(sandbox_id: str) -> str:
    return Sandbox.objects.get(public_id=sandbox_id).status


def audit_of(action: str) -> AuditLog:
    return AuditLog.objects.get(action=action)


# --- schedules -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_schedules_exist_after_migrate_and_are_created_once():
    names = {spec.name for spec in schedules.SCHEDULES}
    rows = Schedule.objects.filter(name__in=names)
    assert {r.name for r in rows} == names  # made by the migrate that built the test database
    for row in rows:
        assert callable(import_string(row.func))
        assert row.schedule_type == Schedule.MINUTES and row.repeats == -1
    assert {r.name: r.minutes for r in rows}["sandhub.sweep"] == 1
    # An admin's change survives; a deleted schedule comes back; nothing is duplicated.
    Schedule.objects.filter(name="sandhub.reconcile").update(minutes=15)
    Schedule.objects.filter(name="sandhub.sweep").delete()
    assert schedules.ensure_schedules() == ["sandhub.sweep"]
    assert schedules.ensure_schedules() == []
    assert Schedule.objects.filter(name__in=names).count() == len(names)
    assert Schedule.objects.get(name="sandhub.reconcile").minutes == 15


# --- auto-cleanup (in-memory backend) --------------------------------------------------------


def test_sweep_deletes_an_expired_sandbox_as_the_system(fake_backend, as_alice, team_a):
    info = services.create_sandbox(as_alice)
    age(info.id, expires_at=timezone.now() - timedelta(seconds=1))

    report = services.sweep_expired_and_idle(SYSTEM)

    assert report.expired == [info.id] and report.idle == [] and report.failed == {}
    assert status_of(info.id) == "deleted" and fake_backend.sandboxes == {}
    row = audit_of("sandbox.expire")
    assert (row.channel, row.actor, row.team, row.target_id, row.outcome) == (
        Channel.SYSTEM,
        None,
        team_a,
        info.id,
        "ok",
    )
    assert "expired" in row.details["reason"]


def test_sweep_deletes_idle_sandboxes_but_not_busy_or_recent_ones(fake_backend, as_alice, team_a):
    idle, busy, recent = (services.create_sandbox(as_alice).id for _ in range(3))
    for sandbox_id in (idle, busy):
        age(sandbox_id, last_activity_at=timezone.now() - LONG_AGO)
    CommandExecution.objects.create(
        sandbox=Sandbox.objects.get(public_id=busy),
        channel="web",
        command="sleep 100000",
        background=True,
        status=CommandStatus.RUNNING,
    )

    report = tasks.sweep()  # the task the schedule runs

    assert report["idle"] == [idle] and report["expired"] == []
    assert [status_of(i) for i in (idle, busy, recent)] == ["deleted", "running", "running"]
    assert audit_of("sandbox.idle").target_id == idle and len(fake_backend.sandboxes) == 2
    # The background command finishes: now the sandbox is idle like any other.
    CommandExecution.objects.update(status=CommandStatus.SUCCEEDED)
    assert services.sweep_expired_and_idle(SYSTEM).idle == [busy]


def test_abandoned_command_rows_stop_keeping_a_sandbox_busy(fake_backend, as_alice, team_a):
    """A web process killed mid-command, or a start that died before the job began."""
    sandbox_id = services.create_sandbox(as_alice).id
    age(sandbox_id, last_activity_at=timezone.now() - LONG_AGO)
    sandbox = Sandbox.objects.get(public_id=sandbox_id)
    long_ago = timezone.now() - timedelta(hours=2)
    rows = [
        CommandExecution.objects.create(
            sandbox=sandbox,
            channel="web",
            command="x",
            status=CommandStatus.RUNNING,
            timeout_seconds=60,
            started_at=long_ago,
        ),
        CommandExecution.objects.create(
            sandbox=sandbox,
            channel="mcp",
            command="y",
            background=True,
            status=CommandStatus.QUEUED,
        ),
        # Still within its own (long) timeout: left alone.
        CommandExecution.objects.create(
            sandbox=sandbox,
            channel="web",
            command="z",
            status=CommandStatus.RUNNING,
            timeout_seconds=3 * 3600,
            started_at=long_ago,
        ),
    ]
    CommandExecution.objects.filter(pk=rows[1].pk).update(created_at=long_ago)

    report = tasks.sweep()

    statuses = [CommandExecution.objects.get(pk=r.pk).status for r in rows]
    assert report["abandoned_commands"] == 2
    assert statuses == ["error", "error", "running"]
    assert status_of(sandbox_id) == "running"  # the long command still keeps it busy
    CommandExecution.objects.filter(pk=rows[2].pk).update(status=CommandStatus.SUCCEEDED)
    assert services.sweep_expired_and_idle(SYSTEM).idle == [sandbox_id]


def test_an_idle_timeout_of_zero_never_deletes(fake_backend, as_alice, team_a):
    team_a.idle_timeout_minutes = 0
    team_a.save()
    info = services.create_sandbox(as_alice)
    age(info.id, last_activity_at=timezone.now() - timedelta(days=30))
    assert services.sweep_expired_and_idle(SYSTEM).idle == []
    assert status_of(info.id) == "running"


def test_sweep_waits_for_an_unreachable_host_and_leaves_claimed_sandboxes(
    fake_backend, as_alice, docker_host
):
    waiting, deleting = (services.create_sandbox(as_alice).id for _ in range(2))
    age(waiting, expires_at=timezone.now() - timedelta(seconds=1))
    age(deleting, expires_at=timezone.now() - timedelta(seconds=1), status="stopping")
    Host.objects.filter(pk=docker_host.pk).update(healthy=False)
    assert services.sweep_expired_and_idle(SYSTEM).expired == []
    assert status_of(waiting) == "running"

    Host.objects.filter(pk=docker_host.pk).update(healthy=True)
    # The sandbox some other worker is deleting (stopping) is not the sweep's business.
    assert services.sweep_expired_and_idle(SYSTEM).expired == [waiting]
    assert status_of(deleting) == "stopping"


def test_sandboxes_stuck_mid_creation_or_deletion_are_finished_after_expiry(fake_backend, as_alice):
    """A process that died while creating or deleting leaves starting/stopping behind."""
    starting, stopping, recent = (services.create_sandbox(as_alice).id for _ in range(3))
    long_expired = timezone.now() - timedelta(hours=1)
    age(starting, status="starting", expires_at=long_expired)
    age(stopping, status="stopping", expires_at=long_expired)
    age(recent, status="stopping", expires_at=timezone.now() - timedelta(minutes=1))

    assert sorted(services.sweep_expired_and_idle(SYSTEM).expired) == sorted([starting, stopping])
    assert [status_of(i) for i in (starting, stopping, recent)] == [
        "deleted",
        "deleted",
        "stopping",
    ]
    assert len(fake_backend.sandboxes) == 1  # their containers are gone too
    assert services.sweep_expired_and_idle(SYSTEM).expired == []


def test_a_failed_deletion_is_left_in_error_and_retried(fake_backend, as_alice, monkeypatch):
    from hosts.backends.base import BackendError

    info = services.create_sandbox(as_alice)
    age(info.id, expires_at=timezone.now() - timedelta(seconds=1))

    def refuse(self, state):
        raise BackendError("engine said no")

    with monkeypatch.context() as patch:
        patch.setattr(FakeBackend, "destroy", refuse)
        report = services.sweep_expired_and_idle(SYSTEM)
    assert "engine said no" in report.failed[info.id] and status_of(info.id) == "error"
    assert audit_of("sandbox.expire").outcome == "backend"

    assert services.sweep_expired_and_idle(SYSTEM).expired == [info.id]
    assert status_of(info.id) == "deleted"


def test_lifecycle_entry_points_are_for_the_system_and_platform_admins(as_alice):
    for call in (
        services.sweep_expired_and_idle,
        services.reconcile_hosts,
        services.probe_all_hosts,
        services.refill_warm_pools,
    ):
        with pytest.raises(PermissionDenied):
            call(as_alice)


# --- probes and reconciliation (in-memory backend) -------------------------------------------


def test_probes_store_figures_that_list_hosts_shows(fake_backend, as_alice):
    services.create_sandbox(as_alice)
    result = tasks.probe_hosts()
    assert result == {"local": {"healthy": True, "idle_score": 0.8}}
    [info] = services.list_hosts(as_alice)
    assert (info.healthy, info.cpu_percent, info.memory_percent, info.sandboxes_running) == (
        True,
        10.0,
        20.0,
        1,
    )
    assert info.last_probe_at is not None


def test_a_silent_host_is_marked_down_skipped_and_comes_back(fake_backend, as_alice, docker_host):
    FakeBackend.down_hosts.add("local")
    report = services.reconcile_hosts(SYSTEM)
    docker_host.refresh_from_db()
    assert report.down == ["local"]
    assert (docker_host.healthy, docker_host.idle_score) == (False, 0.0)
    assert "does not answer" in docker_host.last_error
    assert audit_of("host.down").channel == Channel.SYSTEM
    with pytest.raises(NoCapacity):
        services.create_sandbox(as_alice)

    FakeBackend.down_hosts.clear()
    services.probe_all_hosts(SYSTEM)
    docker_host.refresh_from_db()
    assert docker_host.healthy and docker_host.last_error == ""
    assert audit_of("host.up").target_id == str(docker_host.pk)
    assert services.create_sandbox(as_alice).status == "running"


def _fake_container(backend: FakeBackend, sandbox_id: str, instance: str, age_s: float) -> str:
    spec = SandboxSpec(sandbox_id, "img", 1.0, 256, 64, False, labels={LABEL_INSTANCE: instance})
    key = backend.provision(spec)["container_id"]
    backend.sandboxes[key]["created"] -= age_s
    return key


def test_reconcile_removes_old_orphans_of_this_instance_only(
    fake_backend, as_alice, docker_host, settings
):
    settings.SANDHUB_ORPHAN_GRACE_SECONDS = 60
    backend = get_backend(docker_host)
    live = services.create_sandbox(as_alice)
    for box in fake_backend.sandboxes.values():  # the live sandbox is old too
        box["created"] -= 3600
    old_orphan = _fake_container(backend, "sb_orphan00000", INSTANCE, 3600)
    young_orphan = _fake_container(backend, "sb_young000000", INSTANCE, 5)
    elsewhere = _fake_container(backend, "sb_elsewhere00", "another-deployment", 3600)

    report = services.reconcile_hosts(SYSTEM)

    assert report.removed == ["sb_orphan00000"] and report.lost == []
    assert old_orphan not in fake_backend.sandboxes
    assert {young_orphan, elsewhere} <= set(fake_backend.sandboxes)
    assert status_of(live.id) == "running"
    row = audit_of("reconcile.orphan_removed")
    assert (row.channel, row.target_id) == (Channel.SYSTEM, "sb_orphan00000")


def test_reconcile_marks_a_sandbox_whose_container_vanished_lost(fake_backend, as_alice, team_a):
    info = services.create_sandbox(as_alice)
    kept = services.create_sandbox(as_alice)
    fake_backend.sandboxes.pop(Sandbox.objects.get(public_id=info.id).backend_state["container_id"])

    assert services.reconcile_hosts(SYSTEM).lost == [info.id]
    assert status_of(info.id) == "lost" and status_of(kept.id) == "running"
    row = audit_of("sandbox.lost")
    assert (row.team, row.target_id, row.channel) == (team_a, info.id, Channel.SYSTEM)
    # A lost sandbox can still be deleted by its owner, and is no longer reported.
    services.delete_sandbox(as_alice, info.id)
    assert services.reconcile_hosts(SYSTEM).lost == []


# --- on the real Docker engine ---------------------------------------------------------------


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
def test_a_real_qcluster_runs_the_sweep_schedule(real_docker, as_alice, engine, qcluster):  # noqa: F811
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
