"""A third kind built from the shared parts alone (tests/backends/local.py, about 170 lines):
commands, jobs, listings, writes and sync work through the agent and through the per-command
path, the choice between them follows the setting, the host option, `once` and a missing
python3, and either path reads and cancels a job the other started. No Docker, no sshd."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hosts.backends.base import SandboxSpec
from hosts.models import Host
from tests.backends.local import LocalBackend

PATHS = ("agent", "plain", "no-python")


def spec(sandbox_id: str | None = None) -> SandboxSpec:
    sandbox_id = sandbox_id or f"sb_{uuid.uuid4().hex[:12]}"
    return SandboxSpec(sandbox_id, "local", cpus=1.0, memory_mb=256, pids_limit=64, network=False)


def make_backend(path: str) -> LocalBackend:
    options = {"agent": False} if path == "plain" else {}
    host = Host(name=f"local-{path}", kind="docker", endpoint="local", options=options)
    python = "/nonexistent/python3" if path == "no-python" else None
    return LocalBackend(host, python) if python else LocalBackend(host)


@pytest.fixture(params=PATHS)
def backend(request: pytest.FixtureRequest) -> Iterator[LocalBackend]:
    instance = make_backend(request.param)
    yield instance
    instance.close()


@pytest.fixture
def sandbox(backend: LocalBackend) -> Iterator[dict[str, Any]]:
    state = backend.provision(spec())
    yield state
    backend.destroy(state)


def run(backend: LocalBackend, state: dict[str, Any], script: str, **options: Any) -> Any:
    options = {"cwd": "/workspace", "env": {}, "timeout": 30, "output_cap": 65536, **options}
    return backend.exec(state, ["sh", "-c", script], **options)


def agent_expected(backend: LocalBackend) -> bool:
    return (
        backend.host.options.get("agent", True) and backend.place.python != "/nonexistent/python3"
    )


def test_commands_run_in_the_workspace_with_env_stdin_and_exit_code(backend, sandbox) -> None:
    result = run(backend, sandbox, 'echo "$X in $(pwd)"; cat; exit 3', env={"X": "x1"}, stdin=b"in")
    assert (result.exit_code, result.timed_out) == (3, False)
    assert result.stdout == f"x1 in {sandbox['workspace']}\nin".encode()
    assert backend.agents.running(sandbox) is agent_expected(backend)


def test_a_timeout_kills_the_command_on_either_path(backend, sandbox) -> None:
    started = time.monotonic()
    result = run(backend, sandbox, "echo early; sleep 30", timeout=1)
    assert result.timed_out and result.stdout == b"early\n"
    assert time.monotonic() - started < 10


def test_a_one_off_command_starts_no_agent(backend, sandbox) -> None:
    result = run(backend, sandbox, "echo once", once=True)
    assert result.stdout == b"once\n"
    assert not backend.agents.running(sandbox)


def test_writes_listings_and_sync_see_the_same_files(backend, sandbox) -> None:
    if agent_expected(backend):
        assert backend.agents.write_file(sandbox, "/workspace/dir/a.txt", b"hello") == 5
    else:
        run(backend, sandbox, "mkdir dir && printf hello > dir/a.txt")
    entries = backend.list_dir(sandbox, "/workspace/dir")
    assert [(e.name, e.path, e.size) for e in entries] == [("a.txt", "/workspace/dir/a.txt", 5)]
    page = backend.manifest(sandbox, "/workspace", after=None, limit=10)
    assert [entry.path for entry in page.entries] == ["dir", "dir/a.txt"]
    assert backend.delete_entries(sandbox, "/workspace", ["dir/a.txt"]) == 1
    assert run(backend, sandbox, "ls dir | wc -l").stdout == b"0\n"


def test_a_job_started_on_one_path_is_polled_and_cancelled_on_the_other() -> None:
    agent, plain = make_backend("agent"), make_backend("plain")
    sandbox = agent.provision(spec())
    try:
        for starter, other in ((agent, plain), (plain, agent)):
            job_id = f"job{uuid.uuid4().hex[:6]}"
            job = starter.start_background(
                sandbox,
                ["sh", "-c", "echo started; sleep 60"],
                cwd="/workspace",
                env={},
                job_id=job_id,
            )
            deadline = time.monotonic() + 10
            while other.poll_background(sandbox, job, 100).output != b"started\n":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            other.cancel_background(sandbox, job)
            status = starter.poll_background(sandbox, job, 100)
            assert status.cancelled and not status.running
    finally:
        agent.close()
        plain.close()
