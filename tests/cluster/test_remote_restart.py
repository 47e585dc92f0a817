"""The remote engine's dockerd restarted under running sandboxes (as systemd does: SIGTERM,
then start). Without live-restore the engine stops their containers; their restart policy
(unless-stopped) starts them again when it is back. The platform's agent streams to them
broke: the next call reconnects (a new agent) and answers; a call while the engine is down
fails with a clear error and changes nothing; the probe marks the host unhealthy while down
and healthy again after."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator

import pytest
from django import db

from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import BackendFailure
from sandboxes.models import CommandExecution, Sandbox
from tenants.principal import Principal
from tests.cluster.dockerd2 import SecondEngine
from tests.cluster.remote import platform_on, status_on, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db]


@pytest.fixture
def remote(image: object, second_engine: SecondEngine) -> Iterator[Host]:
    with platform_on(second_engine) as host:
        yield host
    if not second_engine.answers():
        second_engine.up()


def test_sandboxes_carry_on_after_their_engine_restarts(
    remote: Host, second_engine: SecondEngine, as_alice
) -> None:
    platform = Principal.system(None)
    first = services.create_sandbox(as_alice, memory_mb=256)
    second = services.create_sandbox(as_alice, memory_mb=256)
    services.write_file(as_alice, first.id, "kept.txt", "still here\n")
    assert services.run_command(as_alice, first.id, "echo before").stdout == "before\n"
    job = services.start_background(as_alice, first.id, "echo started; sleep 600")
    wait_for(
        lambda: "started" in services.check_background(as_alice, first.id, job.id).output,
        20,
        "the job's output",
    )

    second_engine.down()
    with pytest.raises(BackendFailure, match="unreachable|cannot reach"):
        services.run_command(as_alice, first.id, "echo while down")
    assert not services.probe_host(platform, remote.pk).healthy
    services.reconcile_hosts(platform)
    assert Sandbox.objects.get(public_id=first.id).status == "running"  # unknown, not lost

    second_engine.up()
    assert services.probe_host(platform, remote.pk).healthy
    with contextlib.closing(second_engine.client()) as client:
        assert status_on(client, first.id) == "running"  # unless-stopped brought it back
    after = services.run_command(as_alice, first.id, "cat kept.txt; echo after")
    assert (after.exit_code, after.stdout) == (0, "still here\nafter\n")
    assert services.run_command(as_alice, second.id, "echo second").stdout == "second\n"
    # The job died with its container's processes: it says so, it is not left running.
    check = services.check_background(as_alice, first.id, job.id)
    assert (check.running, check.status) == (False, "error")
    assert "vanished without an exit code (was the sandbox restarted?)" in check.error_message
    assert CommandExecution.objects.get(pk=job.id).finished_at is not None
    for sandbox_id in (first.id, second.id):
        services.delete_sandbox(as_alice, sandbox_id)


@pytest.mark.django_db(transaction=True)
def test_a_command_running_through_a_restart_ends_with_a_clear_error(
    remote: Host, second_engine: SecondEngine, as_alice
) -> None:
    sandbox = services.create_sandbox(as_alice, memory_mb=256)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = services.run_command(
                as_alice, sandbox.id, "echo started; sleep 60; echo never", timeout=120
            )
        except Exception as exc:  # what the caller would see
            outcome["error"] = exc
        finally:
            db.connections.close_all()

    runner = threading.Thread(target=run)
    runner.start()
    wait_for(
        lambda: CommandExecution.objects.filter(
            sandbox__public_id=sandbox.id, status="running", command__contains="sleep 60"
        ).exists(),
        20,
        "the command to run",
    )
    with contextlib.closing(second_engine.client()) as client:
        container = client.containers.list(filters={"label": f"org.sandhub.sandbox={sandbox.id}"})[
            0
        ]
        wait_for(lambda: "sleep 60" in container.top()["Processes"].__str__(), 20, "sleep 60")
    second_engine.restart()
    runner.join(30)
    assert not runner.is_alive(), "the call still waits on a dead engine's stream"
    row = CommandExecution.objects.get(sandbox__public_id=sandbox.id, command__contains="sleep 60")
    assert row.status in {"error", "failed"} and row.finished_at is not None, row.status
    assert "never" not in row.stdout
    assert isinstance(outcome.get("error"), BackendFailure), outcome
    said = "stopped answering during the call|not running \\(exited\\): stopped under the call"
    assert re.search(said, str(outcome["error"])), outcome
    assert re.search(said, row.error_message), row.error_message
    # The next call gets a new agent in the restarted container.
    assert services.run_command(as_alice, sandbox.id, "echo again").stdout == "again\n"
    services.delete_sandbox(as_alice, sandbox.id)


@pytest.mark.parametrize("agent", [True, False], ids=["agent", "per-command-exec"])
def test_a_container_that_did_not_come_back_is_started_on_the_next_call(
    remote: Host, second_engine: SecondEngine, as_alice, settings, agent: bool
) -> None:
    settings.SANDHUB_AGENT = agent
    sandbox = services.create_sandbox(as_alice, memory_mb=256)
    services.write_file(as_alice, sandbox.id, "kept.txt", "still here\n")
    with contextlib.closing(second_engine.client()) as client:
        # As an engine restarted without the restart policy, or a container that failed to
        # start with it: stopped behind the platform's back.
        client.containers.list(filters={"label": f"org.sandhub.sandbox={sandbox.id}"})[0].stop(
            timeout=1
        )
        after = services.run_command(as_alice, sandbox.id, "cat kept.txt")
        assert (after.exit_code, after.stdout) == (0, "still here\n")
        assert status_on(client, sandbox.id) == "running"
    services.delete_sandbox(as_alice, sandbox.id)
