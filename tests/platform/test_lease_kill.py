"""A web process killed with SIGKILL mid-command: its history row is final within seconds.

The web process is real (uvicorn serving platform_site.asgi in a subprocess of its own
session, tests/services/test_restart.py's WebProcess) on the test database and the real
Docker engine; its liveness lease is SANDHUB_LEASE_SECONDS=4. The test process plays the other
live platform process: its own heartbeat (sandboxes/housekeeping/liveness.py) notices the dead
lease and closes the row. On the code before leases this fails: the row stayed `running`
until the sweep's timeout (here 300 s) plus 5 minutes.

The command in the sandbox ends too: the dead process's agent connection closes, the agent
sees the end of its input and kills what it runs (hosts/backends/agent/inside/main.py).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import httpx2 as httpx
import pytest

from sandboxes.housekeeping import liveness
from sandboxes.models import CommandExecution, ProcessLease
from tests.services.test_restart import api, engine, processes, sandbox, wait_for, web  # noqa: F401

pytestmark = pytest.mark.docker

LEASE_SECONDS = 4
MARK = "sleep 477"  # the command, recognisable in the sandbox's process list


@pytest.fixture
def short_leases(settings, monkeypatch):
    settings.SANDHUB_LEASE_SECONDS = LEASE_SECONDS
    monkeypatch.setenv("SANDHUB_LEASE_SECONDS", str(LEASE_SECONDS))


def test_killed_web_process_has_its_command_closed_within_seconds(
    short_leases,
    sandbox,  # noqa: F811
    api,  # noqa: F811
    web,  # noqa: F811
    engine,  # noqa: F811
):
    web.start()
    assert web.process is not None
    url = f"{web.url}/api/v1/sandboxes/{sandbox}/commands/"
    call = threading.Thread(
        target=lambda: _post_ignoring_the_cut(api, url, {"command": MARK, "timeout": 300}),
        daemon=True,
    )
    call.start()
    row = wait_for(
        lambda: CommandExecution.objects.filter(command=MARK, status="running").first(),
        30,
        "the command's row, running",
    )
    lease = ProcessLease.objects.get(pk=row.lease_id)
    assert (lease.pid, lease.kind, lease.ended_at) == (web.process.pid, "web", None)
    wait_for(lambda: _in_sandbox(engine, sandbox), 15, "the command to run in the sandbox")

    pid = web.process.pid
    assert web.kill() == -signal.SIGKILL
    killed_at = time.monotonic()
    liveness.start()  # this process: a live platform process with a heartbeat
    try:
        closed = wait_for(
            lambda: CommandExecution.objects.exclude(status="running").filter(pk=row.pk).first(),
            LEASE_SECONDS * 4,
            "the dead process's command row to be closed",
        )
        took = time.monotonic() - killed_at
    finally:
        liveness.stop()
    assert closed.status == "error" and closed.finished_at is not None
    assert f"the platform process running it stopped (pid {pid} on host " in closed.error_message
    assert ProcessLease.objects.get(pk=lease.pk).end == "expired"
    assert took < LEASE_SECONDS * 4
    # The command inside ends with the agent whose connection was the dead process's.
    wait_for(lambda: not _in_sandbox(engine, sandbox), 20, "the command to end in the sandbox")
    call.join(timeout=10)


def _post_ignoring_the_cut(client: httpx.Client, url: str, body: dict) -> None:
    with contextlib.suppress(httpx.TransportError):  # the server was killed: the point
        client.post(url, json=body, timeout=400)


def _in_sandbox(client, sandbox_id: str) -> bool:
    return any(args == MARK for _, args in processes(client, sandbox_id).values())
