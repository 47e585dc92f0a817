"""The sandbox agent over SSH (hosts/backends/agent/link.py, ssh/agent.py,
transport.py): commands, files, failures, and the round trip's figure, against a real sshd
on loopback (fixtures: tests/ssh/conftest.py).
"""

from __future__ import annotations

import secrets
import shutil
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import BackendError, SandboxGone
from hosts.backends.ssh import layout
from hosts.backends.ssh.agent import agent_link
from hosts.backends.ssh.errors import SshConnectionLost
from hosts.backends.ssh.pool import ConnectionPool
from tests.ssh.helpers import CAP, new_link, remote_processes, run, wait_for
from tests.ssh.sshd import Sshd, running_sshd

pytestmark = pytest.mark.sshd

# -- commands ----------------------------------------------------------------------------------


def test_echo_round_trip_environment_and_cwd(link: AgentLink, sandbox: dict[str, Any]) -> None:
    result = link.exec(
        sandbox,
        ["sh", "-c", 'echo hi; pwd; echo "$HOME|$SANDHUB_SANDBOX_ID|$SANDBOX_VAR|$CALL_VAR|$PATH"'],
        cwd="/workspace",
        env={"CALL_VAR": "from-the-call", "HOME": "/elsewhere"},
        timeout=10,
        output_cap=CAP,
    )
    workspace = sandbox["workspace"]
    assert result.exit_code == 0, result
    assert result.stdout.decode().splitlines() == [
        "hi",
        workspace,
        f"{workspace}|{sandbox['sandbox_id']}|from-the-sandbox|from-the-call|{layout.DEFAULT_PATH}",
    ]
    # Nothing of the login user's environment leaks in (env -i).
    env = run(link, sandbox, "env").stdout.decode()
    assert "SSH_CONNECTION" not in env and "OLDPWD" not in env, env


def test_exit_code_streams_and_live_output(link: AgentLink, sandbox: dict[str, Any]) -> None:
    seen: list[tuple[float, str, bytes]] = []
    started = time.monotonic()

    def on_output(stream: str, chunk: bytes) -> None:
        seen.append((time.monotonic() - started, stream, chunk))

    result = run(link, sandbox, "echo one; sleep 1; echo two >&2; exit 7", on_output=on_output)
    assert (result.exit_code, result.stdout, result.stderr) == (7, b"one\n", b"two\n")
    assert not result.timed_out and result.duration_seconds >= 1
    assert [(stream, chunk) for _, stream, chunk in seen] == [
        ("stdout", b"one\n"),
        ("stderr", b"two\n"),
    ]
    assert seen[0][0] < 0.9, "the first line came only at the end, not live"


def test_50_mb_of_output_is_capped_with_true_counts(
    link: AgentLink, sandbox: dict[str, Any]
) -> None:
    cap = 1024 * 1024
    result = run(link, sandbox, "head -c 50000000 /dev/zero; echo tail", output_cap=cap)
    assert result.exit_code == 0
    assert result.stdout_bytes == 50_000_005 and result.stdout_truncated
    assert len(result.stdout) < cap + 100 and result.stdout.endswith(b"\0tail\n")
    # Streamed live, every byte to the callback: the platform's memory stays bounded.
    counted = [0]

    def count(stream: str, chunk: bytes) -> None:
        counted[0] += len(chunk)

    tracemalloc.start()
    try:
        result = run(
            link,
            sandbox,
            "head -c 50000000 /dev/urandom",
            output_cap=cap,
            on_output=count,
            live_limit=1 << 62,
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.stdout_bytes == counted[0] == 50_000_000
    assert peak < 16 * 1024 * 1024, f"{peak} bytes allocated at the peak"


def test_timeout_kills_the_whole_process_tree(
    sshd: Sshd, link: AgentLink, sandbox: dict[str, Any]
) -> None:
    token = str(900000 + secrets.randbelow(99999))
    script = f"sleep {token}1 & setsid sleep {token}2 & (sleep {token}3 &) ; sleep {token}4"
    started = time.monotonic()
    result = run(link, sandbox, script, timeout=1)
    assert result.timed_out
    assert time.monotonic() - started < 10
    assert remote_processes(sshd, token) == []


def test_twenty_commands_in_parallel_on_one_sandbox(
    link: AgentLink, sandbox: dict[str, Any]
) -> None:
    link.exec(sandbox, ["true"], cwd="/workspace", env={}, timeout=10, output_cap=CAP)
    started = time.monotonic()
    with ThreadPoolExecutor(20) as threads:
        results = list(threads.map(lambda n: run(link, sandbox, f"sleep 1; echo {n}"), range(20)))
    assert [r.stdout for r in results] == [f"{n}\n".encode() for n in range(20)]
    assert time.monotonic() - started < 8, "the commands ran one after another"


def test_a_killed_agent_is_replaced_and_its_commands_die(
    sshd: Sshd, link: AgentLink, sandbox: dict[str, Any]
) -> None:
    token = str(900000 + secrets.randbelow(99999))
    first = link.client(sandbox).pid
    errors: list[BaseException] = []

    def long_command() -> None:
        try:
            run(link, sandbox, f"sleep {token}", timeout=120)
        except BaseException as exc:
            errors.append(exc)

    waiting = threading.Thread(target=long_command)
    waiting.start()
    wait_for(lambda: bool(remote_processes(sshd, token)), what="the long command")
    with pytest.raises(BackendError, match="agent"):
        run(link, sandbox, "kill -9 $PPID; sleep 5")
    waiting.join(30)
    assert not waiting.is_alive() and len(errors) == 1
    assert isinstance(errors[0], BackendError) and "agent" in str(errors[0])
    # The next call starts a new agent, which killed what the dead one left running.
    result = run(link, sandbox, "echo again")
    assert result.stdout == b"again\n"
    assert link.client(sandbox).pid != first
    wait_for(lambda: not remote_processes(sshd, token), timeout=10, what="the orphan's end")


def test_a_vanished_sandbox_directory_is_gone(
    sshd: Sshd, conns: ConnectionPool, link: AgentLink, sandbox: dict[str, Any]
) -> None:
    assert run(link, sandbox, "true").exit_code == 0
    shutil.rmtree(sandbox["dir"])
    with pytest.raises(SandboxGone):
        run(link, sandbox, "true")
    fresh = new_link(sshd, conns)  # a process that never saw it
    try:
        with pytest.raises(SandboxGone):
            fresh.list_dir(sandbox, "/workspace")
    finally:
        fresh.close()


def test_idle_agents_make_room_for_new_ones(
    sshd: Sshd, conns: ConnectionPool, make_sandbox: Callable[..., dict[str, Any]]
) -> None:
    """sshd allows only so many sessions per connection: past max_agents, the least recently
    used idle agent is closed (never a busy one), and starts again when next needed."""
    target = sshd.target()
    agents = agent_link(lambda: conns.get(target), max_agents=2)
    first, second, third = make_sandbox(), make_sandbox(), make_sandbox()
    try:
        script = "while [ ! -e release ]; do sleep 0.05; done"
        busy = threading.Thread(target=run, args=(agents, first, script))
        busy.start()
        wait_for(lambda: agents.running(first), what="the first agent")
        assert run(agents, second, "echo 2").stdout == b"2\n"
        assert run(agents, third, "echo 3").stdout == b"3\n"
        assert [agents.running(s) for s in (first, second, third)] == [True, False, True]
        Path(first["workspace"], "release").touch()
        busy.join(30)  # the first agent's call ended last: the third is the least recent
        assert run(agents, second, "echo again").stdout == b"again\n"
        assert [agents.running(s) for s in (first, second, third)] == [True, True, False]
    finally:
        agents.close()


def test_a_host_without_the_python_is_unavailable(
    sshd: Sshd, conns: ConnectionPool, sandbox: dict[str, Any]
) -> None:
    target = sshd.target()
    missing = agent_link(lambda: conns.get(target), python="python3-not-installed")
    with pytest.raises(AgentUnavailable, match="python3-not-installed"):
        missing.client(sandbox)
    with pytest.raises(AgentUnavailable):  # remembered: not tried on every call
        missing.list_dir(sandbox, "/workspace")


def test_sshd_killed_mid_command_then_back(make_sandbox: Callable[..., dict[str, Any]]) -> None:
    token = str(900000 + secrets.randbelow(99999))
    with running_sshd() as server:
        pool = ConnectionPool()
        target = server.target()
        agents = agent_link(lambda: pool.get(target))
        state = make_sandbox()
        try:
            errors: list[BaseException] = []

            def long_command() -> None:
                try:
                    run(agents, state, f"sleep {token}", timeout=120)
                except BaseException as exc:
                    errors.append(exc)

            waiting = threading.Thread(target=long_command)
            waiting.start()
            wait_for(lambda: bool(remote_processes(server, token)), what="the command")
            server.kill()
            waiting.join(30)
            assert not waiting.is_alive() and len(errors) == 1
            assert isinstance(errors[0], SshConnectionLost), errors[0]
            assert f"connection to {target.where} was lost" in str(errors[0])
            server.start()
            assert run(agents, state, "echo back").stdout == b"back\n"
        finally:
            agents.close()
            pool.close_all()


# -- files -------------------------------------------------------------------------------------


def test_write_read_list_round_trip(link: AgentLink, sandbox: dict[str, Any]) -> None:
    data = bytes(range(256)) * 1000
    assert link.write_file(sandbox, "/workspace/dir/sub/data.bin", data, mode=0o640) == len(data)
    assert link.read_file(sandbox, "/workspace/dir/sub/data.bin", length=10**6) == (
        len(data),
        data,
    )
    assert link.read_file(sandbox, "/workspace/dir/sub/data.bin", offset=256, length=3) == (
        len(data),
        b"\0\1\2",
    )
    entries = link.list_dir(sandbox, "/workspace/dir/sub")
    assert [(e.name, e.path, e.kind, e.size, e.mode) for e in entries] == [
        ("data.bin", "/workspace/dir/sub/data.bin", "file", len(data), "640")
    ]
    top = {e.name: e for e in link.list_dir(sandbox, "/workspace")}
    assert top["dir"].path == "/workspace/dir" and top["dir"].kind == "dir"
    host_file = Path(sandbox["workspace"], "dir/sub/data.bin")
    assert host_file.read_bytes() == data
    with pytest.raises(FileNotFoundError):
        link.read_file(sandbox, "/workspace/missing", length=10)
    with pytest.raises(BackendError):
        link.write_file(sandbox, "/tmp/outside.txt", b"x")


# -- the figure ----------------------------------------------------------------------------------


def test_round_trip_latency(
    sshd: Sshd, conns: ConnectionPool, link: AgentLink, sandbox: dict[str, Any]
) -> None:
    """run_command's backend part: `echo hi` through the agent, beside a raw paramiko exec."""
    options: dict[str, Any] = {"cwd": "/workspace", "env": {}, "timeout": 10, "output_cap": CAP}
    link.exec(sandbox, ["echo", "hi"], **options)  # the agent's start is not the figure
    agent = []
    for _ in range(200):
        started = time.perf_counter()
        assert link.exec(sandbox, ["echo", "hi"], **options).stdout == b"hi\n"
        agent.append(time.perf_counter() - started)
    conn = conns.get(sshd.target())
    raw = []
    for _ in range(50):
        started = time.perf_counter()
        assert conn.run("echo hi", timeout=10).stdout == b"hi\n"
        raw.append(time.perf_counter() - started)
    agent_ms, raw_ms = statistics.median(agent) * 1000, statistics.median(raw) * 1000
    print(
        f"\necho through the SSH agent: median {agent_ms:.2f} ms, p90 "
        f"{statistics.quantiles(agent, n=10)[-1] * 1000:.2f} ms over 200 calls; raw paramiko "
        f"exec: median {raw_ms:.2f} ms over 50"
    )
    assert agent_ms < 15
