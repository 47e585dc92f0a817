"""DockerBackend's commands against the real engine and the real sandbox image: output, stdin,
timeouts and what they kill, the callers' own deadline, capped output in bounded memory, a
fork bomb and a memory hog. Fixtures: tests/docker/conftest.py."""

from __future__ import annotations

import hashlib
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from hosts.backends.base import Unsupported
from hosts.backends.docker import DockerBackend
from hosts.backends.docker.plain import MAX_STDIN_BYTES
from hosts.backends.fallback import commands as fallback_commands
from hosts.models import Host
from tests.docker.helpers import ENDPOINT, make_spec, processes, run
from tests.memory import MIB, peak_rss, reset_peak_rss


def test_echo(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = run(
        backend,
        sandbox,
        "echo hello; echo oops >&2; pwd; echo $GREETING; exit 3",
        env={"GREETING": "hi there"},
    )
    assert result.exit_code == 3
    assert result.stdout == b"hello\n/workspace\nhi there\n"
    assert result.stderr == b"oops\n"
    assert result.stdout_bytes == len(result.stdout) and not result.stdout_truncated
    assert not result.timed_out


def test_argv_is_not_reinterpreted(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    argv = ["printf", "%s|", "a b", "$HOME", "'q'", "*"]
    result = backend.exec(sandbox, argv, cwd="/", env={}, timeout=10, output_cap=MIB)
    assert result.stdout == b"a b|$HOME|'q'|*|"


def test_bad_cwd_is_a_failed_command(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = backend.exec(sandbox, ["pwd"], cwd="/nope", env={}, timeout=10, output_cap=MIB)
    assert result.exit_code != 0 and b"/nope" in result.stderr


def test_exec_is_cheap(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    timings = []
    for _ in range(10):
        started = time.monotonic()
        result = backend.exec(
            sandbox, ["true"], cwd="/workspace", env={}, timeout=10, output_cap=1024
        )
        timings.append(time.monotonic() - started)
        assert result.exit_code == 0
    median = statistics.median(timings)
    print(f"exec true: median {median * 1000:.0f} ms, min {min(timings) * 1000:.0f} ms")
    assert median < 0.5


def test_concurrent_commands_share_one_backend(sandbox: dict[str, Any]) -> None:
    # A fresh instance, so the lazy client is also created under contention.
    shared = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))

    def worker(n: int) -> list[bytes]:
        return [
            shared.exec(
                sandbox,
                ["sh", "-c", f"echo {n}-{i}; echo e{n}-{i} >&2"],
                cwd="/",
                env={},
                timeout=30,
                output_cap=MIB,
            ).stdout
            for i in range(8)
        ]

    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(worker, range(6)))
        clients = {id(shared.engine.client()) for _ in range(3)}
    finally:
        shared.close()
    assert results == [[f"{n}-{i}\n".encode() for i in range(8)] for n in range(6)]
    assert len(clients) == 1


def test_non_utf8_output_is_kept_as_bytes(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = run(backend, sandbox, r"printf '\xff\xfe\x00ok\x80'; printf '\xc3\x28' >&2")
    assert result.stdout == b"\xff\xfe\x00ok\x80"
    assert result.stderr == b"\xc3\x28"


def test_on_output_streams_both_streams(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    seen: list[tuple[str, bytes]] = []
    result = run(
        backend,
        sandbox,
        "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done",
        on_output=lambda stream, chunk: seen.append((stream, chunk)),
    )
    assert b"".join(c for s, c in seen if s == "stdout") == result.stdout == b"out1\nout2\nout3\n"
    assert b"".join(c for s, c in seen if s == "stderr") == result.stderr == b"err1\nerr2\nerr3\n"


def test_stdin(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    data = bytes(range(256)) * 100
    result = run(backend, sandbox, "sha256sum; printenv SANDHUB_STDIN || echo unset", stdin=data)
    assert result.stdout.decode().split()[0] == hashlib.sha256(data).hexdigest()
    assert result.stdout.decode().split()[-1] == "unset"  # not leaked to the command
    with pytest.raises(Unsupported):
        run(backend, sandbox, "cat", stdin=b"x" * (MAX_STDIN_BYTES + 1))


def test_timeout_kills_the_command(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    started = time.monotonic()
    result = run(backend, sandbox, "echo before; sleep 600", timeout=2)
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.exit_code in (None, 124, 137)
    assert result.stdout == b"before\n"
    assert 2 <= elapsed < 5
    assert "sleep 600" not in processes(backend, sandbox)


def test_timeout_kills_backgrounded_children(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    # `&` keeps the group; setsid leaves it (found by the marker); env -i drops the marker but
    # keeps the output pipe (found by the pipe).
    script = "sleep 601 & setsid sleep 602 >/dev/null 2>&1 & env -i sleep 603 & sleep 600"
    started = time.monotonic()
    result = run(backend, sandbox, script, timeout=2)
    assert result.timed_out and time.monotonic() - started < 5
    left = processes(backend, sandbox)
    for marker in ("sleep 600", "sleep 601", "sleep 602", "sleep 603"):
        assert marker not in left, left


def test_children_holding_the_output_do_not_hold_the_caller(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    started = time.monotonic()
    result = run(
        backend,
        sandbox,
        "sleep 611 & env -i sleep 612 & nohup sleep 613 >/dev/null 2>&1 & echo started",
        timeout=20,
    )
    assert time.monotonic() - started < 2
    assert result.exit_code == 0 and not result.timed_out
    assert result.stdout == b"started\n"
    left = processes(backend, sandbox)
    assert "sleep 611" not in left and "sleep 612" not in left
    assert "sleep 613" in left  # detached properly: a server the user meant to keep


def test_a_child_busy_before_its_redirect_is_given_time(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    # `cmd >log &` holds the pipes from the fork until the redirect; here the child computes
    # for some milliseconds first (runnable the whole time, well within the sweep's CPU
    # allowance), like a child that is slow to be scheduled under load. It must survive;
    # one that computes on with the pipes must not.
    started = time.monotonic()
    result = run(
        backend,
        sandbox,
        "(i=0; while [ $i -lt 10000 ]; do i=$((i + 1)); done; exec sleep 614 >/dev/null 2>&1) &"
        " (while :; do :; done) & echo started",
        timeout=20,
    )
    assert time.monotonic() - started < 3
    assert result.exit_code == 0 and result.stdout == b"started\n"
    left = processes(backend, sandbox)
    assert "sleep 614" in left
    # The spinning subshell (its command line is this script's) was killed after its grace.
    assert "echo started" not in left


def test_callers_own_deadline(
    backend: DockerBackend, sandbox: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Make the caller's deadline come before the in-sandbox one: timeout 30 + 2 - 31 = 1 s.
    monkeypatch.setattr(fallback_commands, "CLIENT_GRACE", -31.0)
    started = time.monotonic()
    result = run(backend, sandbox, "echo early; sleep 621 & sleep 620", timeout=30)
    assert time.monotonic() - started < 3
    assert result.timed_out and result.exit_code is None
    assert result.stdout == b"early\n"
    monkeypatch.undo()
    left = processes(backend, sandbox)
    assert "sleep 620" not in left and "sleep 621" not in left


def test_huge_output_is_capped_in_bounded_memory(
    backend: DockerBackend, sandbox: dict[str, Any]
) -> None:
    chunks = 0

    def count(stream: str, chunk: bytes) -> None:
        nonlocal chunks
        chunks += 1

    before = reset_peak_rss()
    result = run(
        backend, sandbox, "head -c 50000000 /dev/zero | tr '\\0' x; echo done >&2", on_output=count
    )
    growth = peak_rss() - before
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == 50_000_000
    assert result.stdout_truncated
    assert len(result.stdout) < MIB + 100  # head + tail + the "bytes cut" marker
    assert result.stdout.startswith(b"x" * 1000) and result.stdout.endswith(b"x" * 1000)
    assert result.stderr == b"done\n"
    assert chunks > 100
    print(f"peak RSS growth while streaming 50 MB: {growth / MIB:.1f} MiB")
    assert growth < 20 * MIB


def test_fork_bomb_is_contained(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    other = backend.provision(make_spec())
    try:
        # The shell returns at once (the bomb runs in the background); what matters is that
        # the call comes back, the bomb dies, and both sandboxes still answer.
        started = time.monotonic()
        run(backend, sandbox, ":(){ :|:& };:", timeout=5)
        assert time.monotonic() - started < 12
        # Right away: the exec must not come back while the bomb, or the zombies it leaves
        # (charged to the pids limit until reaped), still take the pids this one needs.
        alive = run(backend, sandbox, "echo alive")
        assert alive.stdout == b"alive\n", alive
        neighbour = run(backend, other, "echo neighbour")
        assert neighbour.stdout == b"neighbour\n", neighbour
        count = run(backend, sandbox, "ps -e --no-headers | wc -l").stdout.decode()
        assert int(count) < 10  # the bomb is gone, not merely capped
    finally:
        backend.destroy(other)


def test_memory_hog_is_killed(backend: DockerBackend, sandbox: dict[str, Any]) -> None:
    result = run(
        backend, sandbox, "python3 -c \"x = b'x' * (1 << 30); print('survived')\"", timeout=60
    )
    assert result.exit_code == 137, result
    assert not result.timed_out
    assert b"survived" not in result.stdout
    assert run(backend, sandbox, "echo alive").stdout == b"alive\n"
