"""Shell sessions (run_in_shell), as every kind of host must give them: the cases, run against
a real backend by tests/docker/test_terminals.py and tests/ssh/test_terminals.py. Not a test
module.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hosts.backends.base import ExecResult, SandboxBackend
from tests.agent.terminalcases import new_id, processes, wait_for


def shell(
    backend: SandboxBackend,
    state: dict[str, Any],
    session: str,
    command: str,
    *,
    timeout: float = 30,
    output_cap: int = 64 * 1024,
    **options: Any,
) -> ExecResult:
    return backend.run_in_shell(
        state,
        session,
        command,
        env=options.pop("env", {}),
        timeout=timeout,
        output_cap=output_cap,
        idle_timeout=600,
        **options,
    )


def state_persists(backend: SandboxBackend, state: dict[str, Any]) -> None:
    session = new_id("s")
    first = shell(
        backend,
        state,
        session,
        "cd /tmp && export GREETING=hello; shout() { echo \"$1!\"; }; alias ll='echo aliased'; "
        "set -o pipefail; pwd",
        env={"FROM_CALL": "given"},
    )
    assert (first.exit_code, first.stdout, first.stderr) == (0, b"/tmp\n", b"")
    second = shell(
        backend,
        state,
        session,
        'echo "$PWD $GREETING $FROM_CALL"; shout hey; ll; false | true; echo pipefail=$?',
    )
    assert second.stdout == b"/tmp hello given\nhey!\naliased\npipefail=1\n", second
    listed = {t.terminal_id: t for t in backend.list_terminals(state)}
    assert listed[session].kind == "shell"
    # Without a session, commands stay stateless as before.
    plain = backend.exec(
        state,
        ["sh", "-c", 'echo "$PWD ${GREETING:-unset}"'],
        cwd="/workspace",
        env={},
        timeout=30,
        output_cap=4096,
    )
    assert plain.stdout.endswith(b" unset\n") and not plain.stdout.startswith(b"/tmp ")
    assert backend.close_terminal(state, session) is True


def status_streams_cap_and_stdin(backend: SandboxBackend, state: dict[str, Any]) -> None:
    session = new_id("s")
    result = shell(backend, state, session, "echo out; echo err >&2; exit_with() { return $1; }")
    assert (result.exit_code, result.stdout, result.stderr) == (0, b"out\n", b"err\n")
    result = shell(backend, state, session, "exit_with 7")
    assert result.exit_code == 7
    big = shell(backend, state, session, "head -c 100000 /dev/zero | tr '\\0' x", output_cap=1000)
    assert big.stdout_truncated and big.stdout_bytes == 100000
    assert big.stdout.startswith(b"x" * 500) and b"bytes cut" in big.stdout
    assert len(big.stdout) < 1100
    fed = shell(backend, state, session, "tr a-z A-Z; echo done", stdin=b"typed in\n")
    assert fed.stdout == b"TYPED IN\ndone\n"
    empty = shell(backend, state, session, "cat; echo nothing-waited")
    assert empty.stdout == b"nothing-waited\n"
    seen: list[tuple[str, bytes]] = []
    live = shell(
        backend,
        state,
        session,
        "echo live; echo also >&2",
        on_output=lambda stream, chunk: seen.append((stream, chunk)),
    )
    assert live.stdout == b"live\n"
    assert b"".join(c for s, c in seen if s == "stdout") == b"live\n"
    assert b"".join(c for s, c in seen if s == "stderr") == b"also\n"
    backend.close_terminal(state, session)


def timeout_keeps_the_shell(backend: SandboxBackend, state: dict[str, Any]) -> None:
    session = new_id("s")
    shell(backend, state, session, "cd /tmp; export KEPT=yes")
    slow = shell(backend, state, session, "echo before; sleep 2718", timeout=1)
    assert slow.timed_out and slow.stdout == b"before\n"
    wait_for(lambda: "sleep 2718" not in processes(backend, state), "the timed-out sleep is killed")
    after = shell(backend, state, session, 'echo "$PWD $KEPT"')
    assert (after.exit_code, after.stdout, after.stderr) == (0, b"/tmp yes\n", b"")
    backend.close_terminal(state, session)


def stuck_shell_is_replaced(backend: SandboxBackend, state: dict[str, Any]) -> None:
    session = new_id("s")
    shell(backend, state, session, "export LOST=soon")
    stuck = shell(backend, state, session, "while :; do :; done", timeout=1)
    assert stuck.timed_out
    after = shell(backend, state, session, 'echo "lost=${LOST:-gone}"')
    assert after.exit_code == 0 and after.stdout == b"lost=gone\n"
    assert b"state" in after.stderr and b"lost" in after.stderr
    again = shell(backend, state, session, "echo fine")
    assert (again.stdout, again.stderr) == (b"fine\n", b"")  # said once
    backend.close_terminal(state, session)


def sessions_are_independent(backend: SandboxBackend, state: dict[str, Any]) -> None:
    one, two = new_id("s"), new_id("s")
    shell(backend, state, one, "cd /tmp; WHO=one")
    shell(backend, state, two, "cd /; WHO=two")
    assert shell(backend, state, one, 'echo "$PWD $WHO"').stdout == b"/tmp one\n"
    assert shell(backend, state, two, 'echo "$PWD $WHO"').stdout == b"/ two\n"
    assert backend.close_terminal(state, one) and backend.close_terminal(state, two)
    fresh = shell(backend, state, one, 'echo "$PWD ${WHO:-new}"')
    assert fresh.stdout == b"/workspace new\n"  # closed: the next call starts a new shell
    backend.close_terminal(state, one)


def concurrent_runs_take_turns(backend: SandboxBackend, state: dict[str, Any]) -> None:
    """Two calls to one session at once: both run, one after the other, never interleaved."""
    session = new_id("s")
    shell(backend, state, session, "rm -f /tmp/turns")
    step = "echo start-{0} >> /tmp/turns; sleep 0.5; echo end-{0} >> /tmp/turns; echo ran-{0}"
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(shell, backend, state, session, step.format(n)) for n in (1, 2)]
        results = [run.result() for run in runs]
    assert [r.stdout for r in results] == [b"ran-1\n", b"ran-2\n"]
    lines = shell(backend, state, session, "cat /tmp/turns").stdout.split()
    assert lines in (
        [b"start-1", b"end-1", b"start-2", b"end-2"],
        [b"start-2", b"end-2", b"start-1", b"end-1"],
    )
    # The session's shell goes first when memory runs out, as every command does.
    assert shell(backend, state, session, "cat /proc/$$/oom_score_adj").stdout == b"1000\n"
    backend.close_terminal(state, session)
