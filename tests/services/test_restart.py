"""A web process restart leaves background jobs running and recorded (the sandbox agent on).

The web process is real: uvicorn serving platform_site.asgi in a subprocess of its own
session, with SANDHUB_AGENT=true, on the test database (the SQLite test database is a file,
see settings; on PostgreSQL the subprocess gets the test database's URL), so the test is
transactional: the subprocess sees only committed rows. A subprocess rather than the
in-process route (closing AgentLink's clients) because only a real process death shows what
a crash does: the kernel closes the agent's hijacked exec connection, the engine closes the
agent's stdin, the agent exits, and nothing of the old process is left to clean up. A
double-forked job must outlive all of that.

The job ticks until the test releases it (a file it waits for), so its length follows the
restart rather than a guess of how long one takes on a loaded machine; it gives up by
itself (exit 9) after 20 s. No worker runs: the new web process's check records the end.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import httpx2 as httpx
import pytest

from hosts.backends.docker.names import SANDBOX_USER
from sandboxes import services
from sandboxes.models import CommandExecution, Sandbox
from tenants import apikeys
from tests.live import free_port
from tests.qcluster import subprocess_database_url
from tests.webprocess import SessionProcess

pytestmark = pytest.mark.docker

RELEASE = "/workspace/release"
# Ticks every half second until released; exit 9 after 40 ticks (20 s) if never released.
JOB = (
    "i=0; while [ ! -e /workspace/release ]; do i=$((i + 1)); echo tick $i; "
    "[ $i -lt 40 ] || exit 9; sleep 0.5; done; echo done"
)
AGENT_MARK = "sandhub agent"  # on the agent's command line (protocol.BOOTSTRAP)


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class WebProcess(SessionProcess):
    """uvicorn serving platform_site.asgi in a session of its own, as `make run` starts it
    (killing and stopping: tests/webprocess.py's `SessionProcess`)."""

    def __init__(self, port: int, log_path: Path) -> None:
        super().__init__(log_path)
        self.url = f"http://127.0.0.1:{port}"
        self.port = port

    def start(self, timeout: float = 60.0) -> None:
        env = {k: v for k, v in os.environ.items() if k != "SANDHUB_API_KEY"}
        env.update(DATABASE_URL=subprocess_database_url(), SANDHUB_AGENT="true")
        argv = [sys.executable, "-m", "uvicorn", "platform_site.asgi:application"]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        self._spawn(argv, env)
        wait_for(self._answers, timeout, f"the web process on {self.url}", interval=0.1)

    def _answers(self) -> bool:
        if not self.alive:
            raise RuntimeError(f"the web process exited at start:\n{self.log()}")
        try:
            return httpx.get(f"{self.url}/login/", timeout=5).status_code == 200
        except httpx.TransportError:
            return False


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def sandbox(transactional_db, real_docker, as_alice, engine) -> Iterator[str]:
    info = services.create_sandbox(as_alice, memory_mb=256)
    yield info.id
    if Sandbox.objects.get(public_id=info.id).status != "deleted":
        services.delete_sandbox(as_alice, info.id)


@pytest.fixture
def api(alice, team_a) -> Iterator[httpx.Client]:
    key = apikeys.create_key(alice, team_a, name="restart", scopes="read,write").plaintext
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        yield client


@pytest.fixture
def web(tmp_path) -> Iterator[WebProcess]:
    """A web process, not started; whatever runs of it at the end is stopped."""
    process = WebProcess(free_port(), tmp_path / "web.log")
    yield process
    process.stop()


def processes(engine, sandbox_id: str) -> dict[int, tuple[int, str]]:
    """pid -> (session id, command line) inside the sandbox, straight through the engine."""
    container = engine.containers.get(f"sandhub-{sandbox_id}")
    out = container.exec_run(["ps", "-eo", "pid=,sid=,args="], user="1000").output.decode()
    rows = (line.split(None, 2) for line in out.splitlines() if line.strip())
    return {int(row[0]): (int(row[1]), row[2] if len(row) > 2 else "") for row in rows}


def agents(engine, sandbox_id: str) -> set[int]:
    return {pid for pid, (_, args) in processes(engine, sandbox_id).items() if AGENT_MARK in args}


def job_alive(engine, sandbox_id: str, pid: int) -> bool:
    """The job's runner is alive: its pid is there, still leading its own session."""
    found = processes(engine, sandbox_id).get(pid)
    return found is not None and found[0] == pid


def ticks(output: str) -> list[int]:
    return [int(n) for n in re.findall(r"^tick (\d+)$", output, re.MULTILINE)]


def check(api: httpx.Client, url: str) -> dict:
    response = api.get(url, params={"tail_lines": 1000})
    assert response.status_code == 200, response.text
    return response.json()


def test_web_restart_leaves_background_job_running_and_recorded(sandbox, api, web, engine):
    web.start()
    base = f"{web.url}/api/v1/sandboxes/{sandbox}"
    started = api.post(f"{base}/background/", json={"command": JOB, "max_runtime_seconds": 60})
    assert started.status_code == 202, started.text
    command_id = started.json()["id"]
    url = f"{base}/background/{command_id}/"
    job = CommandExecution.objects.get(pk=command_id).background_state["job"]
    # Started through the agent of this web process, the job leading a session of its own.
    old_agents = agents(engine, sandbox)
    assert len(old_agents) == 1, processes(engine, sandbox)
    assert job_alive(engine, sandbox, job["pid"])
    # Read live, from the log in the sandbox: the job has not ended.
    wait_for(lambda: ticks(check(api, url)["output"]), 10, "the job's first tick in its log")

    assert web.kill() == -signal.SIGKILL
    # The dead process's agent sees its stdin end and exits; the job does not go with it.
    wait_for(lambda: not agents(engine, sandbox), 15, "the old agent to exit")
    assert job_alive(engine, sandbox, job["pid"])
    assert CommandExecution.objects.get(pk=command_id).status == "running"

    web.start()  # the same port, a new process: no agent, no state but the database
    first = check(api, url)
    assert (first["running"], first["status"], first["exit_code"]) == (True, "running", None)
    seen = ticks(first["output"])
    assert seen == list(range(1, len(seen) + 1)), first["output"]
    later = wait_for(
        lambda: (c := check(api, url)) and len(ticks(c["output"])) > len(seen) and c,
        10,
        "the job's log to grow",
    )
    assert later["running"] and later["elapsed_seconds"] > first["elapsed_seconds"]

    # A command through the new process starts a new agent, which releases the job.
    ran = api.post(f"{base}/commands/", json={"command": f"touch {RELEASE}"})
    assert ran.status_code == 201 and ran.json()["exit_code"] == 0, ran.text
    new_agents = agents(engine, sandbox)
    assert len(new_agents) == 1 and not new_agents & old_agents

    ended = wait_for(lambda: (c := check(api, url)) and not c["running"] and c, 15, "the end")
    assert (ended["status"], ended["exit_code"]) == ("succeeded", 0), ended
    assert ended["output"].endswith("\ndone\n") and not ended["output_truncated"]
    # Its exit file is the runner's last write: the process may take a moment more to go.
    wait_for(lambda: not job_alive(engine, sandbox, job["pid"]), 5, "the job's runner to exit")

    # Recorded on the row: the whole log, every tick from before and after the restart.
    row = CommandExecution.objects.get(pk=command_id)
    assert (row.status, row.exit_code) == ("succeeded", 0)
    assert row.finished_at is not None and not row.stdout_truncated
    count = len(ticks(row.stdout))
    assert count >= len(ticks(later["output"])) and count < 40
    assert row.stdout == "".join(f"tick {n}\n" for n in range(1, count + 1)) + "done\n"
    assert row.stdout_bytes == len(row.stdout)
    container = engine.containers.get(f"sandhub-{sandbox}")
    log = container.exec_run(["cat", job["log"]], user=SANDBOX_USER).output.decode()
    assert log == row.stdout
