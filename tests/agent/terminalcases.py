"""Terminals and shell sessions, as every kind of host must give them: the cases themselves,
run against a real backend and sandbox by tests/docker/test_terminals.py and
tests/ssh/test_terminals.py. Not a test module.

Waits are for what must come (a text in the terminal's output, a process gone from /proc),
each with a deadline; nothing sleeps to synchronize.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from hosts.backends.base import BackendError, SandboxBackend, TerminalGone, TerminalStream

WAIT = 20.0  # seconds for anything to show (a loaded CI host is slow)


def new_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_until(stream: TerminalStream, needle: bytes, seen: bytearray | None = None) -> bytes:
    """The terminal's output up to and including `needle` (all of it, from the attach)."""
    buffer = seen if seen is not None else bytearray()
    deadline = time.monotonic() + WAIT
    while needle not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"{needle!r} never came; the terminal showed {bytes(buffer)!r}")
        try:
            chunk = stream.read(timeout=remaining)
        except TimeoutError:
            continue
        if not chunk:
            raise AssertionError(f"the terminal ended before {needle!r}: {bytes(buffer)!r}")
        buffer += chunk
    return bytes(buffer)


def read_to_end(stream: TerminalStream) -> bytes:
    buffer = bytearray()
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            chunk = stream.read(timeout=deadline - time.monotonic())
        except TimeoutError:
            continue
        if not chunk:
            return bytes(buffer)
        buffer += chunk
    raise AssertionError(f"the terminal never ended: {bytes(buffer)!r}")


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


def processes(backend: SandboxBackend, state: dict[str, Any]) -> str:
    """Every process's command line in the sandbox, from /proc (one a line)."""
    script = 'for p in /proc/[0-9]*; do tr "\\0" " " < "$p/cmdline"; echo; done 2>/dev/null'
    result = backend.exec(
        state, ["sh", "-c", script], cwd="/workspace", env={}, timeout=30, output_cap=1 << 20
    )
    return result.stdout.decode("utf-8", "replace")


def open_terminal(
    backend: SandboxBackend, state: dict[str, Any], idle: float = 600.0, **size: int
) -> str:
    terminal = new_id()
    backend.open_terminal(
        state,
        terminal,
        cols=size.get("cols", 80),
        rows=size.get("rows", 24),
        env={"SANDHUB_TEST": "yes"},
        idle_timeout=idle,
    )
    return terminal


# --- terminals -------------------------------------------------------------------------------
def state_and_reattach(
    backend: SandboxBackend, state: dict[str, Any], drop: Callable[[], None]
) -> None:
    """cd and export carry over in the terminal; a client attached through a NEW agent gets
    the scrollback and the same shell."""
    terminal = open_terminal(backend, state)
    with backend.attach_terminal(state, terminal) as stream:
        stream.write(b"cd /tmp; export A=1\n")
        stream.write(b"echo A=$A PWD=$PWD SHELL_PID=$$ T=$SANDHUB_TEST; echo mark-$((6*7))\n")
        first = read_until(stream, b"mark-42")
    assert b"A=1 PWD=/tmp" in first and b"T=yes" in first
    shell_pid = first.split(b"SHELL_PID=")[-1].split()[0]
    drop()  # the agent (or the whole backend) that opened it is gone
    with backend.attach_terminal(state, terminal) as again:
        replay = read_until(again, b"mark-42")
        assert b"A=1 PWD=/tmp" in replay  # the scrollback
        again.write(b"echo again-$A-$$-$PWD\n")
        read_until(again, b"again-1-" + shell_pid + b"-/tmp", bytearray(replay))
    assert backend.close_terminal(state, terminal) is True


def resize(backend: SandboxBackend, state: dict[str, Any]) -> None:
    terminal = open_terminal(backend, state, cols=100, rows=30)
    with backend.attach_terminal(state, terminal) as stream:
        stream.write(b"stty size; cat /proc/$$/oom_score_adj; echo sized-$((1+1))\n")
        seen = bytearray()
        read_until(stream, b"sized-2", seen)
        assert b"30 100\r\n1000\r\n" in seen  # and its shell goes first if memory runs out
        stream.resize(132, 43)
        stream.write(b"stty size; echo resized-$((2+2))\n")
        read_until(stream, b"resized-4", seen)
        assert b"43 132" in seen
    backend.close_terminal(state, terminal)


def two_attachers(backend: SandboxBackend, state: dict[str, Any]) -> None:
    terminal = open_terminal(backend, state)
    with (
        backend.attach_terminal(state, terminal) as one,
        backend.attach_terminal(state, terminal) as two,
    ):
        info = {t.terminal_id: t for t in backend.list_terminals(state)}[terminal]
        assert (info.kind, info.attached) == ("terminal", 2) and info.pid > 0
        one.write(b"echo both-$((3*3))\n")
        read_until(one, b"both-9")
        read_until(two, b"both-9")
        two.write(b"echo other-$((4*4))\n")
        read_until(one, b"other-16")
    backend.close_terminal(state, terminal)


def close_kills_everything(backend: SandboxBackend, state: dict[str, Any]) -> None:
    terminal = open_terminal(backend, state)
    with backend.attach_terminal(state, terminal) as stream:
        # A background child, one detached into a session of its own, and a foreground one.
        stream.write(b"sleep 3141 & setsid sleep 3142 & echo started-$((5*5)); sleep 3143\n")
        read_until(stream, b"started-25")
        wait_for(lambda: "sleep 3143" in processes(backend, state), "the foreground sleep runs")
        assert backend.close_terminal(state, terminal) is True
        assert read_to_end(stream) is not None  # the attached client reads the end
    left = processes(backend, state)
    for leftover in ("sleep 3141", "sleep 3142", "sleep 3143", "terminal holder"):
        assert leftover not in left, left
    assert backend.close_terminal(state, terminal) is False
    with pytest.raises(TerminalGone):
        backend.attach_terminal(state, terminal)
    assert terminal not in {t.terminal_id for t in backend.list_terminals(state)}


def idle_timeout(backend: SandboxBackend, state: dict[str, Any]) -> None:
    terminal = open_terminal(backend, state, idle=1.0)
    with backend.attach_terminal(state, terminal) as stream:  # attached: it stays
        stream.write(b"echo here-$((7*7))\n")
        read_until(stream, b"here-49")
        time.sleep(1.5)  # longer than its idle timeout, attached: it must still be there
        stream.write(b"echo still-$((8*8))\n")
        read_until(stream, b"still-64")
    wait_for(
        lambda: terminal not in {t.terminal_id for t in backend.list_terminals(state)},
        "the idle terminal ended",
    )
    with pytest.raises(TerminalGone):
        backend.attach_terminal(state, terminal)


def shell_exit_ends_it(backend: SandboxBackend, state: dict[str, Any]) -> None:
    terminal = open_terminal(backend, state)
    with backend.attach_terminal(state, terminal) as stream:
        stream.write(b"echo bye-$((9*9)); exit\n")
        assert b"bye-81" in read_to_end(stream)
    wait_for(
        lambda: terminal not in {t.terminal_id for t in backend.list_terminals(state)},
        "the ended terminal is no longer listed",
    )
    with pytest.raises(TerminalGone):
        backend.attach_terminal(state, terminal)


def bad_ids_refused(backend: SandboxBackend, state: dict[str, Any]) -> None:
    for bad in ("../etc", "a/b", "", "UPPER", "x" * 49, "-lead", "a.sock"):
        with pytest.raises(BackendError):
            backend.open_terminal(state, bad, cols=80, rows=24, env={}, idle_timeout=10)
        with pytest.raises(BackendError):
            backend.attach_terminal(state, bad)
        with pytest.raises(BackendError):
            backend.run_in_shell(
                state, bad, "true", env={}, timeout=5, output_cap=100, idle_timeout=10
            )
    with pytest.raises(BackendError, match="variable"):
        backend.run_in_shell(
            state, "s-env", "true", env={"A B": "x"}, timeout=5, output_cap=100, idle_timeout=10
        )
    terminal = open_terminal(backend, state)
    with pytest.raises(BackendError, match="open already"):
        backend.open_terminal(state, terminal, cols=80, rows=24, env={}, idle_timeout=10)
    with pytest.raises(BackendError, match="not a shell session"):
        backend.run_in_shell(
            state, terminal, "true", env={}, timeout=5, output_cap=100, idle_timeout=10
        )
    backend.close_terminal(state, terminal)


def much_output_and_ctrl_c(backend: SandboxBackend, state: dict[str, Any]) -> None:
    """Output far over every window and buffer arrives whole and in order; Ctrl-C reaches
    the foreground program through the PTY."""
    terminal = open_terminal(backend, state)
    with backend.attach_terminal(state, terminal) as stream:
        stream.write(b"seq 1 300000; echo seq-$((10*10))\n")
        seen = bytearray()
        read_until(stream, b"seq-100", seen)
        # Every line, in order (the first may share its line with the prompt's escapes).
        numbers = [int(line) for line in bytes(seen).split(b"\r\n") if line.isdigit()]
        assert len(numbers) >= 299999 and numbers == list(range(300001 - len(numbers), 300001))
        stream.write(b"sleep 4242\n")
        wait_for(lambda: "sleep 4242" in processes(backend, state), "the sleep runs")
        stream.write(b"\x03")
        stream.write(b"echo after-$((11*11))\n")
        read_until(stream, b"after-121")
        assert "sleep 4242" not in processes(backend, state)
    backend.close_terminal(state, terminal)
