"""kill_command on a real Docker sandbox: a running foreground command, named by the id
run_command reports as it starts, is killed from another thread (as from another web process:
only the id and the row's marker cross), its call returns at once as killed, and its processes
are gone. Another team's command answers "not found"; an ended one is left as it is."""

from __future__ import annotations

import threading
import time

import pytest

from sandboxes import services
from sandboxes.contract.errors import NotFound, PermissionDenied
from sandboxes.models import CommandExecution
from tenants.principal import Principal

pytestmark = pytest.mark.docker


def start_in_thread(principal, sandbox_id: str, command: str):
    started: list[int] = []
    results: list[object] = []

    def run() -> None:
        results.append(
            services.run_command(
                principal, sandbox_id, command, timeout=120, on_start=started.append
            )
        )

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while not started:
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.01)
    return worker, started[0], results


def test_a_running_command_is_killed_by_its_id(world, shared_sandbox):
    alice = world.principal()
    worker, command_id, results = start_in_thread(alice, shared_sandbox, "sleep 615; echo no")
    time.sleep(0.5)  # it is running in the sandbox by now
    row = CommandExecution.objects.get(pk=command_id)
    assert row.status == "running" and row.background_state["marker"].isalnum()

    bob = Principal(user=world.bob, team=world.team_b, channel="web")
    with pytest.raises(NotFound):
        services.kill_command(bob, shared_sandbox, command_id)
    victor = world.principal(world.victor)  # a viewer may not
    with pytest.raises(PermissionDenied):
        services.kill_command(victor, shared_sandbox, command_id)

    began = time.monotonic()
    assert services.kill_command(alice, shared_sandbox, command_id) is True
    worker.join(30)
    assert not worker.is_alive() and time.monotonic() - began < 10
    (result,) = results
    assert result.status in ("failed", "error") and result.exit_code != 0, result
    assert "no" not in result.stdout
    left = services.run_command(alice, shared_sandbox, "pgrep -f 'sleep 61[5]' || echo none")
    assert left.stdout.strip() == "none"
    assert services.kill_command(alice, shared_sandbox, command_id) is False  # ended: as it is
