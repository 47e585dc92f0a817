"""The sandbox agent without Docker: its framing, its bundle, and the agent itself run by this
machine's python3 over pipes (hosts.backends.agent.transports.PipeTransport).

Fast: no engine, no database. The Docker side is tests/docker/test_agent.py, the SSH side
tests/ssh/test_agent.py.
"""

from __future__ import annotations

import ast
import contextlib
import os
import random
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.agent import calls, client, protocol
from hosts.backends.agent.calls import file_entry
from hosts.backends.agent.client import AgentBroken, AgentClient, NotAFile
from hosts.backends.agent.inside import PARTS, constants, procs, wire
from hosts.backends.agent.source import agent_source
from hosts.backends.agent.transports import PipeTransport
from hosts.backends.base import BackendError, ExecResult, HeadTailBuffer


# --- the protocol's one copy of its constants, and the bundle ------------------------------
def test_both_ends_take_the_protocol_constants_from_one_module() -> None:
    shared = {name for name in vars(constants) if name.isupper()}
    assert len(shared) > 25
    for name in shared:
        assert getattr(protocol, name) is getattr(constants, name), name
    # The agent's first part is that module: nothing in it is written twice.
    assert PARTS[0] == "constants"
    assert "VERSION = " not in Path(wire.__file__).read_text()
    assert protocol.HEADER.size == 9


def test_the_bundle_is_one_python_38_program_of_all_parts() -> None:
    source = agent_source().decode()
    tree = ast.parse(source, feature_version=(3, 8))  # the oldest python3 it must run on
    assert source.startswith("from __future__ import annotations\n")
    relative = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    # Only the one under `if TYPE_CHECKING:` (never run) may stay.
    assert all(n.col_offset > 0 for n in relative)
    for name in PARTS:
        assert f"# ---- inside/{name}.py\n" in source
    compile(source, "sandhub-agent", "exec")


def test_parts_define_distinct_names_and_import_only_earlier_parts() -> None:
    root = Path(wire.__file__).parent
    defined: dict[str, str] = {}
    for index, name in enumerate(PARTS):
        tree = ast.parse((root / f"{name}.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.module in PARTS[:index], f"{name} imports {node.module}"
            targets: list[str] = []
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                targets = [node.name]
            elif isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
                targets += [
                    e.id
                    for t in node.targets
                    if isinstance(t, ast.Tuple)
                    for e in t.elts
                    if isinstance(e, ast.Name)
                ]
            for target in targets:
                assert target not in defined, f"{target} in {name} and {defined.get(target)}"
                defined[target] = name


def test_frames_survive_any_split() -> None:
    frames = [
        protocol.control(1, protocol.REQUEST, {"op": "ping"}),
        protocol.data(2, protocol.CH_STDIN, bytes(range(256)) * 40),
        protocol.frame(3, protocol.CANCEL),
        protocol.data(4, protocol.CH_FILE, b""),
    ]
    stream = b"".join(frames)
    for _ in range(50):
        reader, got, at = protocol.FrameReader(), [], 0
        while at < len(stream):
            step = random.randint(1, 700)
            got += reader.feed(stream[at : at + step])
            at += step
        assert [protocol.HEADER.pack(len(p), r, k) + p for r, k, p in got] == frames
        assert reader.pending == 0


def test_oversized_frames_are_refused() -> None:
    with pytest.raises(ValueError):
        protocol.frame(1, protocol.DATA, b"x" * (protocol.MAX_PAYLOAD + 1))
    header = protocol.HEADER.pack(protocol.MAX_PAYLOAD + 1, 1, protocol.DATA)
    with pytest.raises(ValueError, match="corrupt"):
        protocol.FrameReader().feed(header)


def test_kept_output_is_split_as_head_tail_buffer_splits_it() -> None:
    for cap in (0, 1, 7, 64, 1000):
        for _ in range(20):
            chunks = [os.urandom(random.randint(0, 300)) for _ in range(random.randint(0, 12))]
            ours, theirs = procs.HeadTail(cap), HeadTailBuffer(cap)
            for chunk in chunks:
                ours.write(chunk)
                theirs.write(chunk)
            rebuilt = HeadTailBuffer(cap)
            rebuilt.write(bytes(ours.head))
            rebuilt.write(bytes(ours.tail))
            rebuilt.total = ours.total
            assert rebuilt.getvalue() == theirs.getvalue()
            assert ours.total == theirs.total


def test_names_that_are_not_utf8_read_as_the_listing_of_the_exec_path() -> None:
    entry = file_entry(["a\udcffb", "/w/a\udcffb", "file", 3, 1.5, "644"])
    assert entry.name == "a\\xffb" and entry.path == "/w/a\\xffb"


# --- the agent, run locally over pipes (the `agent` fixture: tests/agent/conftest.py) ------
def run(agent: AgentClient, script: str, **options: Any) -> ExecResult:
    options.setdefault("timeout", 20)
    options.setdefault("output_cap", 1024 * 1024)
    return agent.exec(["sh", "-c", script], cwd="/", env=options.pop("env", {}), **options)


def marked_pids(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and procs.marked(int(name), f"\0SANDHUB_EXEC_ID={marker}\0".encode()):
            found.append(int(name))
    return found


def test_round_trip_binary_stdin_and_output(agent: AgentClient) -> None:
    assert agent.info["version"] == protocol.VERSION and agent.info["subreaper"] is True
    data = os.urandom(3 * protocol.WINDOW)  # more than the window: needs the agent's credit
    result = agent.exec(["cat"], cwd="/", env={}, timeout=20, output_cap=len(data), stdin=data)
    assert result.exit_code == 0 and result.stdout == data and result.stdout_bytes == len(data)
    small = agent.exec(["cat"], cwd="/", env={}, timeout=20, output_cap=100, stdin=b"tiny")
    assert small.stdout == b"tiny"  # all of it there before the command even started
    result = run(agent, 'echo "$A"; echo oops >&2; exit 7', env={"A": "x y"})
    assert (result.exit_code, result.stdout, result.stderr) == (7, b"x y\n", b"oops\n")


def test_output_is_capped_with_true_counts(agent: AgentClient) -> None:
    seen: list[int] = []
    result = run(
        agent,
        "head -c 30000000 /dev/zero | tr '\\0' a; echo end",
        output_cap=1000,
        on_output=lambda stream, chunk: seen.append(len(chunk)),
    )
    assert result.stdout_bytes == 30000004 and result.stdout_truncated
    assert result.stdout.startswith(b"a" * 500) and result.stdout.endswith(b"a" * 496 + b"end\n")
    assert b"[30000004 bytes cut]" not in result.stdout and b"bytes cut" in result.stdout
    assert 1024 * 1024 <= sum(seen) <= 1024 * 1024 + 65536  # live output stops at its budget


def test_past_its_budget_live_output_is_sampled(agent: AgentClient) -> None:
    seen: list[bytes] = []
    script = "for i in $(seq 1 40); do head -c 3000 /dev/zero | tr '\\0' x; echo \" $i\"; "
    script += "sleep 0.02; done"
    result = run(agent, script, live_limit=20, on_output=lambda _, chunk: seen.append(chunk))
    live = b"".join(seen)
    assert live.startswith(b"x" * 20)  # the budget, as it came, then samples of the latest
    assert b"bytes not shown live" in live and live.endswith(b"x 40\n")
    assert 4000 < len(live) < 40 * 3004 / 2
    assert result.stdout_bytes == 40 * 3003 + 31  # "x... N\n", N of one or two digits


def test_what_holds_the_output_after_the_command_ends_is_swept(agent: AgentClient) -> None:
    started = time.monotonic()
    result = run(agent, "(while :; do echo x; done) & sleep 60 & echo started")
    assert result.exit_code == 0 and b"started\n" in result.stdout
    assert time.monotonic() - started < 5
    spared = run(agent, "sleep 30 >/dev/null 2>&1 & echo $!")
    assert os.path.exists(f"/proc/{int(spared.stdout)}")  # it let go of the output in time
    os.kill(int(spared.stdout), 9)


def test_exec_failures_read_as_a_shell_says_them(agent: AgentClient) -> None:
    missing = agent.exec(["no-such-program"], cwd="/", env={}, timeout=5, output_cap=100)
    assert missing.exit_code == 127 and b"no-such-program" in missing.stderr
    bad_cwd = agent.exec(["true"], cwd="/no/such/dir", env={}, timeout=5, output_cap=100)
    assert bad_cwd.exit_code == 126 and b"/no/such/dir" in bad_cwd.stderr


def test_timeout_kills_the_whole_tree(agent: AgentClient) -> None:
    marker = uuid.uuid4().hex
    started = time.monotonic()
    result = agent.exec(
        ["sh", "-c", "sleep 100 & setsid sleep 100 & (trap '' TERM; sleep 100) & sleep 100"],
        cwd="/",
        env={},
        timeout=1,
        output_cap=100,
        marker=marker,
    )
    assert result.timed_out and result.exit_code == 124
    assert time.monotonic() - started < 6
    assert marked_pids(marker) == []


def test_cancel_and_a_failing_callback_stop_the_command(agent: AgentClient) -> None:
    call = agent.start_exec(["sh", "-c", "sleep 100"], cwd="/", env={}, timeout=60, output_cap=10)
    time.sleep(0.2)
    call.cancel()
    result = call.wait()
    assert call.cancelled and result.exit_code == 143 and not result.timed_out
    assert marked_pids(call.marker) == []

    def explode(stream: str, chunk: bytes) -> None:
        raise RuntimeError("the reader went away")

    marker = uuid.uuid4().hex
    with pytest.raises(RuntimeError, match="went away"):
        agent.exec(
            ["sh", "-c", "while :; do echo x; sleep 0.05; done"],
            cwd="/",
            env={},
            timeout=60,
            output_cap=10,
            on_output=explode,
            marker=marker,
        )
    assert marked_pids(marker) == []


def test_many_commands_in_flight(agent: AgentClient) -> None:
    results: dict[int, bytes] = {}

    def one(number: int) -> None:
        results[number] = run(agent, f"sleep 0.2; echo {number}").stdout

    threads = [threading.Thread(target=one, args=(n,)) for n in range(50)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: f"{n}\n".encode() for n in range(50)}
    assert time.monotonic() - started < 5  # in parallel, not one after the other


def test_files(agent: AgentClient, tmp_path: Path) -> None:
    root = str(tmp_path)
    content = os.urandom(2 * protocol.WINDOW + 5)
    assert agent.write_file(f"{root}/a/b/c.bin", content, root=root, mode=0o640) == len(content)
    assert (tmp_path / "a/b/c.bin").read_bytes() == content
    assert oct((tmp_path / "a/b/c.bin").stat().st_mode & 0o7777) == "0o640"
    assert agent.read_file(f"{root}/a/b/c.bin", offset=10, length=5) == (
        len(content),
        content[10:15],
    )
    [entry] = agent.list_dir(f"{root}/a/b")
    assert (entry.name, entry.path, entry.kind, entry.size, entry.mode) == (
        "c.bin",
        f"{root}/a/b/c.bin",
        "file",
        len(content),
        "640",
    )
    os.symlink("/tmp", tmp_path / "link")
    with pytest.raises(NotADirectoryError, match="symbolic link"):
        agent.write_file(f"{root}/link/x", b"x", root=root)
    with pytest.raises(NotADirectoryError, match="not a directory"):
        agent.write_file(f"{root}/a/b/c.bin/x", b"x", root=root)
    with pytest.raises(FileExistsError):
        agent.write_file(f"{root}/a", b"x", root=root)
    with pytest.raises(FileNotFoundError):
        agent.read_file(f"{root}/missing", length=1)
    with pytest.raises(NotAFile):
        agent.read_file(root, length=1)
    with pytest.raises(FileNotFoundError):
        agent.list_dir(f"{root}/missing")
    assert not [p for p in os.listdir(tmp_path / "a/b") if p.startswith(".sandhub")]


def test_a_broken_stream_fails_calls_in_flight_and_the_client_for_good() -> None:
    transport = PipeTransport()
    agent = AgentClient(transport)
    call = agent.start_exec(["sleep", "3"], cwd="/", env={}, timeout=60, output_cap=10)
    transport.process.kill()
    with pytest.raises(AgentBroken, match="stream ended"):
        call.wait()
    assert not agent.alive
    with pytest.raises(BackendError):
        agent.exec(["true"], cwd="/", env={}, timeout=5, output_cap=10)


def test_an_agent_that_stops_answering_is_dropped_and_killed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client, "CLIENT_GRACE", 0.5)  # the caller's deadline: timeout + 0.6 s
    monkeypatch.setattr(calls, "CANCEL_GRACE", 1.0)
    transport = PipeTransport()
    agent = AgentClient(transport)
    os.kill(transport.process.pid, signal.SIGSTOP)  # as a command could do to its parent
    try:
        started = time.monotonic()
        result = agent.exec(["true"], cwd="/", env={}, timeout=0.5, output_cap=10, kill_after=0.1)
        assert result.timed_out and result.exit_code is None
        assert time.monotonic() - started < 5
        assert not agent.alive and agent.abandoned
        other = AgentClient(PipeTransport())
        assert other.kill_agent(transport.process.pid)  # what agent_link does on replacing it
        assert not other.kill_agent(other.pid or 0) and not other.kill_agent(1)
        transport.process.wait(5)
        other.close()
    finally:
        with contextlib.suppress(OSError):
            os.kill(transport.process.pid, signal.SIGKILL)
