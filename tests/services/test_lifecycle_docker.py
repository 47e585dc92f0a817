"""Pause, resume and stop through the services on the real Docker engine: the engine's own
freezer and stop, the workspace disk and the network fences across a stop, the rule for
running commands, background jobs frozen past their runtime, and pause / resume / delete
racing from threads with nothing left on the engine. The rules themselves, on the in-memory
backend: test_lifecycle.py."""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress

import docker
import pytest

from hosts.backends.docker.disk import disk_dir
from hosts.backends.docker.network import TAG_PREFIX
from sandboxes import services
from sandboxes.contract.errors import Conflict, NotFound, QuotaExceeded
from sandboxes.housekeeping import reconcile
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from tenants.principal import Principal
from tests.engine import engine_cleaning_up
from tests.services.helpers import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def own_instance(settings):
    settings.SANDHUB_INSTANCE = INSTANCE


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    with engine_cleaning_up(INSTANCE) as client:
        yield client


@pytest.fixture
def made(real_docker, as_alice) -> Iterator[list[str]]:
    created: list[str] = []
    yield created
    for sandbox_id in created:
        if Sandbox.objects.get(public_id=sandbox_id).status != "deleted":
            with suppress(Exception):
                services.delete_sandbox(as_alice, sandbox_id)


def create(made: list[str], principal: Principal, **options) -> str:
    info = services.create_sandbox(principal, memory_mb=128, **options)
    made.append(info.id)
    return info.id


def engine_status(engine: docker.DockerClient, sandbox_id: str) -> str:
    (container,) = labelled(engine, sandbox_id)
    return container.status


def labelled(engine: docker.DockerClient, sandbox_id: str) -> list:
    # A claimed warm-pool member keeps its pool id in its labels: find it by its name too.
    by_label = engine.containers.list(
        all=True, filters={"label": f"org.sandhub.sandbox={sandbox_id}"}
    )
    return by_label or engine.containers.list(all=True, filters={"name": f"sandhub-{sandbox_id}"})


def mounted(path: str) -> bool:
    with open("/proc/self/mountinfo") as handle:
        return any(line.split()[4] == path for line in handle)


def test_pause_freezes_and_a_command_thaws_it_with_memory_kept(made, as_alice, engine):
    sandbox_id = create(made, as_alice)
    services.run_command(as_alice, sandbox_id, "echo in-memory > /tmp/kept")
    holder = services.start_background(as_alice, sandbox_id, "sleep 600")
    change = services.pause_sandbox(as_alice, sandbox_id)
    assert change.sandbox.status == "paused" and engine_status(engine, sandbox_id) == "paused"
    # Reconciliation lists a paused container like any other: not lost.
    report = reconcile.reconcile(grace=0)
    assert sandbox_id not in report.lost
    assert Sandbox.objects.get(public_id=sandbox_id).status == "paused"

    result = services.run_command(as_alice, sandbox_id, "cat /tmp/kept")
    assert (result.exit_code, result.stdout) == (0, "in-memory\n")  # /tmp is memory: kept
    assert result.resumed_seconds is not None and result.resumed_seconds < 30
    assert engine_status(engine, sandbox_id) == "running"
    check = services.check_background(as_alice, sandbox_id, holder.id)
    assert check.running


def test_a_job_paused_past_its_max_runtime_times_out_as_the_sandbox_resumes(made, as_alice):
    sandbox_id = create(made, as_alice)
    job = services.start_background(as_alice, sandbox_id, "sleep 600", max_runtime_seconds=2)
    services.pause_sandbox(as_alice, sandbox_id)
    time.sleep(2.5)  # wall time passing while it is frozen is what is tested
    change = services.resume_sandbox(as_alice, sandbox_id)
    assert change.background_ended == [job.id]
    check = services.check_background(as_alice, sandbox_id, job.id)
    assert (check.running, check.status) == (False, "timed_out"), check


@pytest.mark.django_db(transaction=True)  # the command runs in a thread of its own
def test_pause_and_stop_are_refused_while_a_command_runs(made, as_alice):
    sandbox_id = create(made, as_alice)
    started = threading.Event()
    outcome: dict[str, object] = {}

    def command() -> None:
        outcome["result"] = services.run_command(
            as_alice,
            sandbox_id,
            "echo started; sleep 3; echo done",
            on_output=lambda stream, chunk: started.set(),
        )

    runner = threading.Thread(target=command)
    runner.start()
    try:
        assert started.wait(30), "the command never started"
        for service in (services.pause_sandbox, services.stop_sandbox):
            with pytest.raises(Conflict, match="wait for it to finish or cancel it"):
                service(as_alice, sandbox_id)
    finally:
        runner.join(60)
    assert outcome["result"].stdout == "started\ndone\n"
    assert services.pause_sandbox(as_alice, sandbox_id).sandbox.status == "paused"


def test_stop_keeps_the_files_and_start_mounts_the_disk_again(made, as_alice, engine):
    sandbox_id = create(made, as_alice)
    services.write_file(as_alice, sandbox_id, "kept.txt", "files survive a stop\n")
    services.run_command(as_alice, sandbox_id, "echo scratch > /tmp/gone")
    job = services.start_background(as_alice, sandbox_id, "echo job-said-this; sleep 600")
    wait_for(
        lambda: "job-said" in services.check_background(as_alice, sandbox_id, job.id).output,
        20,
        "the job's output",
    )
    change = services.stop_sandbox(as_alice, sandbox_id)
    assert change.background_ended == [job.id]
    assert engine_status(engine, sandbox_id) == "exited"
    assert CommandExecution.objects.get(pk=job.id).status == CommandStatus.CANCELLED
    # Its log went with the container's memory; its row kept what it had said.
    assert CommandExecution.objects.get(pk=job.id).stdout == "job-said-this\n"
    # As after a reboot of the machine: the disk is no longer mounted.
    volume = Sandbox.objects.get(public_id=sandbox_id).backend_state["volume"]
    mountpoint = str(disk_dir() / volume)
    if mounted(mountpoint):
        subprocess.run(["umount", mountpoint], check=True)

    read = services.read_file(as_alice, sandbox_id, "kept.txt")
    assert read.content == b"files survive a stop\n" and read.resumed_seconds is not None
    assert mounted(mountpoint) and engine_status(engine, sandbox_id) == "running"
    after = services.run_command(as_alice, sandbox_id, "ls /tmp; df -m /workspace | tail -1")
    assert "gone" not in after.stdout  # the processes and memory are new
    assert int(after.stdout.split()[1]) <= 5200  # the sandbox's own disk, not the host's


def test_a_network_sandbox_keeps_its_fences_across_a_stop(made, as_alice, team_a, engine):
    team_a.allow_network = True
    team_a.save()
    sandbox_id = create(made, as_alice, network=True)
    network = Sandbox.objects.get(public_id=sandbox_id).backend_state["network"]
    services.stop_sandbox(as_alice, sandbox_id)
    # As after a flush of the packet filter: the start puts the rules back, in both tables
    # (filter: the proxy's two ports, the reject towards the host, no forwarding; nat: the
    # redirects to the egress proxy).
    for table in ("filter", "nat"):
        for line in tagged(table, network):
            subprocess.run(
                ["iptables", "-w", "-t", table, "-D", *shlex.split(line)[1:]], check=True
            )
    services.resume_sandbox(as_alice, sandbox_id)
    assert (len(tagged("filter", network)), len(tagged("nat", network))) == (4, 2)
    container = labelled(engine, sandbox_id)[0]
    container.reload()
    assert list(container.attrs["NetworkSettings"]["Networks"]) == [network]


def tagged(table: str, network: str) -> list[str]:
    rules = subprocess.run(["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True)
    return [line for line in rules.stdout.splitlines() if TAG_PREFIX + network in line]


@pytest.mark.django_db(transaction=True)  # the racers are threads with connections of their own
def test_pause_resume_and_delete_racing_leave_one_consistent_state(real_docker, as_alice, engine):
    sandbox_id = services.create_sandbox(as_alice, memory_mb=128).id
    pause, resume, stop = services.pause_sandbox, services.resume_sandbox, services.stop_sandbox
    rounds = [
        [pause, resume, stop, resume],
        [stop, pause, resume, pause],
        [resume, pause, services.delete_sandbox, stop],  # a delete in the middle
        [pause, stop, resume, resume],
    ]
    barrier = threading.Barrier(len(rounds))
    outcomes: list[str] = []

    def race(operations) -> None:
        barrier.wait(30)
        for operation in operations:
            try:
                operation(as_alice, sandbox_id)
                outcomes.append(f"{operation.__name__}: ok")
            except (Conflict, QuotaExceeded, NotFound) as exc:
                outcomes.append(f"{operation.__name__}: {exc.code}")

    threads = [threading.Thread(target=race, args=(ops,)) for ops in rounds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert len(outcomes) == sum(map(len, rounds)), outcomes
    assert any(o.endswith(": ok") for o in outcomes), outcomes

    row = Sandbox.objects.get(public_id=sandbox_id)
    expected = {"running": "running", "paused": "paused", "stopped": "exited"}
    if row.status == "deleted":
        assert labelled(engine, sandbox_id) == []
    else:  # the row says what the engine has
        assert row.status in expected, (row.status, outcomes)
        assert engine_status(engine, sandbox_id) == expected[row.status]
        services.delete_sandbox(as_alice, sandbox_id)
    state = row.backend_state
    assert labelled(engine, sandbox_id) == []
    assert all(v.name != state["volume"] for v in engine.volumes.list())
    assert not mounted(str(disk_dir() / state["volume"]))
    assert not (disk_dir() / f"{state['volume']}.img").exists()


@pytest.mark.parametrize("how", ["pause", "stop"])
def test_deleting_a_paused_or_stopped_sandbox_leaves_nothing(made, as_alice, engine, how):
    sandbox_id = create(made, as_alice)
    state = Sandbox.objects.get(public_id=sandbox_id).backend_state
    getattr(services, f"{how}_sandbox")(as_alice, sandbox_id)
    services.delete_sandbox(as_alice, sandbox_id)
    assert labelled(engine, sandbox_id) == []
    assert all(v.name != state["volume"] for v in engine.volumes.list())
    assert not mounted(str(disk_dir() / state["volume"]))
    assert not (disk_dir() / f"{state['volume']}.img").exists()
