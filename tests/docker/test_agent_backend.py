"""DockerBackend with the sandbox agent wired in (settings.SANDHUB_AGENT, host option `agent`).

Real Docker engine, as tests/docker/test_agent.py. Engine execs are
counted by wrapping the engine's APIClient.exec_create: with the agent on, a sandbox pays one
(the agent's own) however many commands it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hosts.backends.base import ExecResult
from hosts.backends.docker import DockerBackend
from tests.docker.helpers import make_spec


def run(backend: DockerBackend, state: dict[str, Any], script: str) -> ExecResult:
    return backend.exec(
        state, ["sh", "-c", script], cwd="/workspace", env={}, timeout=30, output_cap=4096
    )


@pytest.fixture
def execs(backend: DockerBackend, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The engine execs created from now on (their first argument each)."""
    api = backend.engine.api()
    created: list[str] = []
    original = api.exec_create

    def counting(container: str, cmd: Any, *args: Any, **kwargs: Any) -> Any:
        created.append(cmd if isinstance(cmd, str) else cmd[0])
        return original(container, cmd, *args, **kwargs)

    monkeypatch.setattr(api, "exec_create", counting)
    yield created


@pytest.fixture
def agent_on(settings: Any) -> None:
    settings.SANDHUB_AGENT = True


def test_second_command_starts_no_engine_exec(
    backend: DockerBackend,
    sandbox: dict[str, Any],
    execs: list[str],
    agent_on: None,
) -> None:
    assert run(backend, sandbox, "echo one").stdout == b"one\n"
    started = len(execs)
    assert started <= 1  # the agent's exec, if this sandbox had none yet
    for number in range(5):
        result = run(backend, sandbox, f"echo {number}")
        assert result.exit_code == 0 and result.stdout == f"{number}\n".encode()
    assert len(execs) == started
    assert backend.list_dir(sandbox, "/workspace") is not None
    assert len(execs) == started


def test_an_image_without_python3_runs_commands_through_the_backend(
    backend: DockerBackend,
    no_python_image: str,
    agent_on: None,
) -> None:
    state = backend.provision(make_spec(image_reference=no_python_image))
    try:
        for _ in range(2):
            result = run(backend, state, "echo hi; echo err >&2; exit 3")
            assert (result.exit_code, result.stdout, result.stderr) == (3, b"hi\n", b"err\n")
    finally:
        backend.destroy(state)


def test_agent_off_uses_one_engine_exec_per_command(
    backend: DockerBackend,
    sandbox: dict[str, Any],
    execs: list[str],
    settings: Any,
) -> None:
    settings.SANDHUB_AGENT = False
    for number in range(3):
        assert run(backend, sandbox, f"echo {number}").stdout == f"{number}\n".encode()
    assert execs == ["sh"] * 3


def test_host_option_turns_the_agent_off(
    backend: DockerBackend,
    sandbox: dict[str, Any],
    execs: list[str],
    agent_on: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backend.host, "options", {**backend.host.options, "agent": False})
    assert run(backend, sandbox, "echo off").stdout == b"off\n"
    assert run(backend, sandbox, "echo off").stdout == b"off\n"
    assert execs == ["sh", "sh"]


def test_a_one_off_command_starts_no_agent_but_uses_a_running_one(
    backend: DockerBackend,
    execs: list[str],
    agent_on: None,
) -> None:
    # run_once: an agent would cost its start for one command. A sandbox that has one uses it.
    state = backend.provision(make_spec())
    try:
        once = backend.exec(
            state,
            ["echo", "once"],
            cwd="/workspace",
            env={},
            timeout=30,
            output_cap=4096,
            once=True,
        )
        assert (once.exit_code, once.stdout) == (0, b"once\n")
        assert not backend.agents.running(state) and execs == ["sh"]  # the per-command wrapper
        assert run(backend, state, "echo again").stdout == b"again\n"  # starts the agent
        assert backend.agents.running(state)
        started = len(execs)
        again = backend.exec(
            state,
            ["echo", "once"],
            cwd="/workspace",
            env={},
            timeout=30,
            output_cap=4096,
            once=True,
        )
        assert again.stdout == b"once\n" and len(execs) == started
    finally:
        backend.destroy(state)
