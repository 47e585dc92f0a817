"""Terminals and shell sessions on the Docker backend: real engine, real sandbox image, the
sandbox agent and its holders (the cases: tests/agent/terminalcases.py, shellcases.py)."""

from __future__ import annotations

from typing import Any

import pytest

from hosts.backends.base import Unsupported
from hosts.backends.docker import DockerBackend
from hosts.models import Host
from tests.agent import shellcases, terminalcases
from tests.docker.helpers import ENDPOINT, make_spec


@pytest.fixture(autouse=True)
def agent_on(settings: Any) -> None:
    settings.SANDHUB_AGENT = True


def test_terminal_state_carries_over_and_reattaches_through_a_new_agent(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    terminalcases.state_and_reattach(backend, sandbox, lambda: backend.drop_agent(sandbox))


def test_terminal_reattaches_from_another_backend_instance(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    other = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))
    try:
        terminal = terminalcases.open_terminal(other, sandbox)
        with other.attach_terminal(sandbox, terminal) as stream:
            stream.write(b"export FROM=other; echo set-$((2*3))\n")
            terminalcases.read_until(stream, b"set-6")
    finally:
        other.close()  # that "web process" is gone, its agents with it
    with backend.attach_terminal(sandbox, terminal) as stream:
        stream.write(b"echo got-$FROM\n")
        terminalcases.read_until(stream, b"got-other")
    backend.close_terminal(sandbox, terminal)


def test_terminal_resize(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    terminalcases.resize(backend, sandbox)


def test_much_output_arrives_whole_and_ctrl_c_interrupts(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    terminalcases.much_output_and_ctrl_c(backend, sandbox)


def test_two_attachers_see_the_same_output(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    terminalcases.two_attachers(backend, sandbox)


def test_close_kills_the_shell_and_all_it_started(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    terminalcases.close_kills_everything(backend, sandbox)


def test_idle_terminal_ends_once_nobody_is_attached(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    terminalcases.idle_timeout(backend, sandbox)


def test_shell_exit_ends_the_terminal(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    terminalcases.shell_exit_ends_it(backend, sandbox)


def test_ids_that_could_name_a_path_are_refused(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    terminalcases.bad_ids_refused(backend, sandbox)


def test_holders_live_outside_the_workspace(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    terminal = terminalcases.open_terminal(backend, sandbox)
    shellcases.shell(backend, sandbox, "s-files", "true")
    names = [entry.name for entry in backend.list_dir(sandbox, "/workspace")]
    assert names == [] or all("sock" not in name and "sandhub" not in name for name in names)
    mode = backend.exec(
        sandbox,
        ["stat", "-c", "%a %U", "/tmp/.sandhub-terminals"],
        cwd="/workspace",
        env={},
        timeout=30,
        output_cap=100,
    )
    assert mode.stdout == b"700 sandbox\n"
    backend.close_terminal(sandbox, terminal)


def test_shell_session_state_persists(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    shellcases.state_persists(backend, sandbox)


def test_shell_session_status_streams_cap_and_stdin(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    shellcases.status_streams_cap_and_stdin(backend, sandbox)


def test_shell_session_timeout_kills_the_command_and_keeps_the_shell(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    shellcases.timeout_keeps_the_shell(backend, sandbox)


def test_shell_stuck_in_a_builtin_loop_is_replaced_and_says_so(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    shellcases.stuck_shell_is_replaced(backend, sandbox)


def test_concurrent_calls_to_one_session_take_turns(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    shellcases.concurrent_runs_take_turns(backend, sandbox)


def test_shell_sessions_are_independent(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    shellcases.sessions_are_independent(backend, sandbox)


def test_without_python3_terminals_are_unsupported_saying_why(
    backend: DockerBackend, no_python_image: str
) -> None:
    state = backend.provision(make_spec(image_reference=no_python_image))
    try:
        with pytest.raises(Unsupported, match="python3"):
            backend.open_terminal(state, "t-1", cols=80, rows=24, env={}, idle_timeout=10)
        with pytest.raises(Unsupported, match="python3"):
            shellcases.shell(backend, state, "s-1", "true")
    finally:
        backend.destroy(state)


def test_agent_turned_off_means_no_terminals(
    backend: DockerBackend, sandbox: dict[str, Any], settings: Any
) -> None:
    settings.SANDHUB_AGENT = False
    with pytest.raises(Unsupported, match="turned off"):
        backend.list_terminals(sandbox)
