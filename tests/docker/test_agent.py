"""The sandbox agent in real Docker sandboxes (hosts/backends/agent/link.py, docker/agent.py).

Needs the Docker engine and sandhub/sandbox:latest, as every test in tests/docker/ does (it
fails loudly without them). Sandboxes are provisioned with DockerBackend; what the agent did
is checked from the outside with plain engine execs where it matters (no process carrying a
command's marker is left, the agent is gone).
"""

from __future__ import annotations

import hashlib
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import docker.errors
import pytest

from hosts.backends.agent import calls as agent_calls
from hosts.backends.agent import client as agent_client
from hosts.backends.agent.client import AgentBroken, AgentUnavailable, NotAFile
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import BackendError, SandboxGone
from hosts.backends.docker import DockerBackend
from hosts.backends.docker.names import container_ref
from sandboxes.policy.limits import DEFAULT_PIDS_LIMIT
from tests.docker.agent_helpers import marked, outside, run
from tests.docker.helpers import make_spec
from tests.memory import MIB, peak_rss, reset_peak_rss


# --- commands ------------------------------------------------------------------------------
def test_echo_round_trip_on_one_agent(
    link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    result = run(link, sandbox, "echo hi; echo err >&2; id -u; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"hi\n99999\n", b"err\n")
    client = link.client(sandbox)
    assert client.info["subreaper"] is True and client.info["python"].startswith("3.")
    run(link, sandbox, "true")
    assert link.client(sandbox) is client  # one agent per sandbox, reused
    command_line = outside(engine, sandbox, f"tr '\\0' ' ' < /proc/{client.pid}/cmdline")
    assert "sandhub agent" in command_line
    data = bytes(range(256)) * 5000
    echoed = link.exec(
        sandbox, ["cat"], cwd="/", env={}, timeout=30, output_cap=2 * MIB, stdin=data
    )
    assert echoed.stdout == data
    small = link.exec(sandbox, ["cat"], cwd="/", env={}, timeout=30, output_cap=100, stdin=b"x")
    assert small.stdout == b"x"


def test_100_commands_in_parallel_each_get_their_own_output(
    link: AgentLink, backend: DockerBackend
) -> None:
    # 100 commands at once are 100 shells and up to 100 agent threads: a real sandbox's pids
    # limit (DEFAULT_PIDS_LIMIT, 256) has room for them, the tests' usual 128 does not (under
    # load the shells lived long enough to use it up, and the spawns were refused).
    sandbox = backend.provision(make_spec(pids_limit=DEFAULT_PIDS_LIMIT))

    def one(number: int) -> bytes:
        return run(link, sandbox, f"echo {number}; echo e{number} >&2").stdout

    try:
        started = time.monotonic()
        with ThreadPoolExecutor(100) as pool:
            outputs = list(pool.map(one, range(100)))
        assert outputs == [f"{n}\n".encode() for n in range(100)]
        print(f"100 parallel commands: {time.monotonic() - started:.2f} s")
    finally:
        backend.destroy(sandbox)


def test_200_mb_of_output_is_capped_in_bounded_memory(
    link: AgentLink, sandbox: dict[str, Any]
) -> None:
    received = 0

    def count(stream: str, chunk: bytes) -> None:
        nonlocal received
        received += len(chunk)

    link.client(sandbox)  # started before the baseline
    before = reset_peak_rss()
    result = run(
        link, sandbox, "head -c 200000000 /dev/zero | tr '\\0' x; echo done >&2", on_output=count
    )
    growth = peak_rss() - before
    assert result.exit_code == 0 and result.stderr == b"done\n"
    assert result.stdout_bytes == 200_000_000 and result.stdout_truncated
    assert len(result.stdout) < MIB + 100
    assert result.stdout.startswith(b"x" * 1000) and result.stdout.endswith(b"x" * 1000)
    assert MIB <= received < 2 * MIB  # live output up to its budget, no more
    print(f"peak RSS growth for 200 MB of output: {growth / MIB:.1f} MiB")
    assert growth < 10 * MIB


def test_timeout_kills_the_whole_tree(
    link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    client = link.client(sandbox)
    started = time.monotonic()
    call = client.start_exec(
        [
            "bash",
            "-c",
            "sleep 701 & setsid sleep 702 & (trap '' TERM; sleep 703) &"
            " nohup sleep 704 >/dev/null 2>&1 & echo started; sleep 705",
        ],
        cwd="/workspace",
        env={},
        timeout=2,
        output_cap=MIB,
    )
    result = call.wait()
    assert result.timed_out and result.exit_code == 124 and result.stdout == b"started\n"
    assert time.monotonic() - started < 8
    assert marked(engine, sandbox, call.marker) == ""
    left = outside(engine, sandbox, "ps -eo args")
    assert not [n for n in range(701, 706) if f"sleep {n}" in left], left


def test_leftovers_holding_the_output_go_and_detached_ones_stay(
    link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    # As the per-command path does (tests/docker/test_exec.py), so commands behave the same.
    started = time.monotonic()
    script = "sleep 611 & env -i sleep 612 & nohup sleep 613 >/dev/null 2>&1 & echo started"
    result = run(link, sandbox, script)
    assert time.monotonic() - started < 2
    assert result.exit_code == 0 and result.stdout == b"started\n" and not result.timed_out
    left = outside(engine, sandbox, "ps -eo args")
    assert "sleep 611" not in left and "sleep 612" not in left
    assert "sleep 613" in left


def test_cancel(link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient) -> None:
    call = link.client(sandbox).start_exec(
        ["bash", "-c", "echo going; sleep 710 & sleep 711"],
        cwd="/workspace",
        env={},
        timeout=300,
        output_cap=MIB,
    )
    time.sleep(0.5)
    started = time.monotonic()
    call.cancel()
    result = call.wait()
    assert time.monotonic() - started < 5
    assert call.cancelled and not result.timed_out and result.exit_code == 143
    assert result.stdout == b"going\n"
    assert marked(engine, sandbox, call.marker) == ""


def test_after_a_fork_bomb_the_next_echo_answers_50_times(
    link: AgentLink, backend: DockerBackend, engine: docker.DockerClient
) -> None:
    state = backend.provision(make_spec(pids_limit=64))
    try:
        started = time.monotonic()
        bomb = run(link, state, ":(){ :|:& };:", timeout=3)
        assert time.monotonic() - started < 20, bomb
        for _ in range(50):
            assert run(link, state, "echo hi").stdout == b"hi\n"
        count = outside(engine, state, "ps -e --no-headers | wc -l")
        assert int(count) < 10, count  # the bomb is gone, not merely capped
    finally:
        backend.destroy(state)


def test_an_agent_killed_from_inside_is_replaced(
    link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    first = link.client(sandbox)
    in_flight = first.start_exec(["sleep", "720"], cwd="/", env={}, timeout=300, output_cap=MIB)
    with pytest.raises(AgentBroken):
        run(link, sandbox, "kill -9 $PPID; sleep 5")  # the agent is this command's parent
    with pytest.raises(AgentBroken):
        in_flight.wait()
    assert run(link, sandbox, "echo back").stdout == b"back\n"
    second = link.client(sandbox)
    assert second is not first and second.pid != first.pid
    # What the dead agent ran is nobody's now; the new agent kills it when asked (the link
    # asks for commands it sees fail this way).
    assert second.kill_marked(in_flight.marker)
    assert "sleep 720" not in outside(engine, sandbox, "ps -eo args")


def test_a_stuck_agent_is_dropped_and_killed(
    link: AgentLink,
    sandbox: dict[str, Any],
    engine: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_client, "CLIENT_GRACE", 0.5)
    monkeypatch.setattr(agent_calls, "CANCEL_GRACE", 1.0)
    stuck = link.client(sandbox)
    started = time.monotonic()
    result = run(link, sandbox, "kill -STOP $PPID; sleep 1", timeout=0.5)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 10
    assert not stuck.alive
    monkeypatch.undo()
    assert run(link, sandbox, "echo fresh").stdout == b"fresh\n"
    assert link.client(sandbox).pid != stuck.pid
    assert outside(engine, sandbox, f"cat /proc/{stuck.pid}/stat 2>&1").startswith("cat:")


def test_a_removed_container_is_gone(
    link: AgentLink, backend: DockerBackend, engine: docker.DockerClient
) -> None:
    state = backend.provision(make_spec())
    try:
        assert run(link, state, "echo hi").stdout == b"hi\n"
        errors: list[BaseException] = []

        def in_flight() -> None:
            try:
                run(link, state, "sleep 600")
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=in_flight)
        thread.start()
        time.sleep(0.5)
        engine.api.remove_container(container_ref(state), force=True)
        thread.join(30)
        assert errors and isinstance(errors[0], SandboxGone), errors
        with pytest.raises(SandboxGone):
            run(link, state, "echo hi")
    finally:
        backend.destroy(state)


# --- files ---------------------------------------------------------------------------------
def test_files_read_write_list(
    link: AgentLink, backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    content = bytes(range(256)) * 8000
    assert link.write_file(sandbox, "/workspace/a/b/c.bin", content, mode=0o640) == len(content)
    assert link.read_file(sandbox, "/workspace/a/b/c.bin", offset=256, length=3) == (
        len(content),
        b"\x00\x01\x02",
    )
    check = run(link, sandbox, "stat -c '%u %a' a/b/c.bin a/b; md5sum < a/b/c.bin")
    digest = hashlib.md5(content).hexdigest().encode()
    assert check.stdout == b"99999 640\n99999 755\n" + digest + b"  -\n"
    # The listing is the per-command path's, entry for entry.
    run(link, sandbox, "cd a && ln -s b link && mkdir d && printf x > $'n\\xffame'")
    for path in ("/workspace/a", "/workspace/a/b/c.bin"):
        ours = sorted(link.list_dir(sandbox, path), key=lambda e: e.name)
        theirs = sorted(backend.list_dir(sandbox, path), key=lambda e: e.name)
        assert ours == theirs
    run(link, sandbox, "ln -s /tmp /workspace/tmp-link; touch secret; chmod 000 secret")
    with pytest.raises(NotADirectoryError, match="symbolic link"):
        link.write_file(sandbox, "/workspace/tmp-link/x", b"x")
    with pytest.raises(PermissionError):
        link.read_file(sandbox, "/workspace/secret", length=10)
    with pytest.raises(PermissionError):
        link.read_file(sandbox, "/etc/shadow", length=10)
    with pytest.raises(NotAFile):
        link.read_file(sandbox, "/workspace/a", length=10)
    with pytest.raises(FileNotFoundError):
        link.list_dir(sandbox, "/workspace/missing")
    with pytest.raises(BackendError, match="under /workspace"):
        link.write_file(sandbox, "/tmp/x", b"x")
    streamed = link.write_file(sandbox, "/workspace/big", io.BytesIO(b"y" * (3 * MIB)))
    assert streamed == 3 * MIB and link.read_file(sandbox, "/workspace/big", length=1)[0] == 3 * MIB


def test_a_background_job_outlives_the_agent(
    link: AgentLink, backend: DockerBackend, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    job = AgentJobs(link).start_background(
        sandbox,
        ["sh", "-c", 'sleep 2; echo "done $X in $PWD"'],
        cwd="/workspace",
        env={"X": "x1"},
        job_id="agentjob",
    )
    agent_pid = link.client(sandbox).pid
    outside(engine, sandbox, f"kill -9 {agent_pid}")
    # Polled and read by the per-command path's own code: the job's files are as they were.
    deadline = time.monotonic() + 30
    status = backend.poll_background(sandbox, job, 4096)
    while status.running and time.monotonic() < deadline:
        time.sleep(0.2)
        status = backend.poll_background(sandbox, job, 4096)
    assert not status.running and status.exit_code == 0, status
    assert status.output == b"done x1 in /workspace\n"
    # A log like the per-command path's (the shell's 0644 under the umask), not executable.
    assert outside(engine, sandbox, f"stat -c %a {job['dir']}/log") == "644\n"
    assert run(link, sandbox, "echo alive").stdout == b"alive\n"
    cancelled = AgentJobs(link).start_background(
        sandbox, ["sleep", "730"], cwd="/workspace", env={}, job_id="agentjob2"
    )
    backend.cancel_background(sandbox, cancelled)
    assert backend.poll_background(sandbox, cancelled, 0).cancelled


# --- an image without python3 --------------------------------------------------------------
def test_an_image_without_python3_is_refused_fast_and_keeps_the_old_path(
    link: AgentLink, backend: DockerBackend, no_python_image: str
) -> None:
    state = backend.provision(make_spec(image_reference=no_python_image))
    try:
        with pytest.raises(AgentUnavailable, match="python3"):
            link.client(state)
        started = time.monotonic()
        with pytest.raises(AgentUnavailable):
            run(link, state, "echo hi")
        assert time.monotonic() - started < 0.05  # remembered: no failed start per command
        old = backend.exec(state, ["echo", "hi"], cwd="/", env={}, timeout=30, output_cap=100)
        assert old.stdout == b"hi\n"
    finally:
        backend.destroy(state)
