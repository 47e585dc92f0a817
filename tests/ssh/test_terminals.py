"""Terminals and shell sessions on isolated SSH sandboxes (real sshd, real sudo, bubblewrap):
the holders run inside the sandbox's namespaces and cgroup, die with it, and another
tenant's sandbox on the same host cannot reach them, however it tries."""

from __future__ import annotations

import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.base import SandboxSpec, TerminalGone, Unsupported
from hosts.backends.ssh.backend import SshBackend
from tests.agent import shellcases, terminalcases
from tests.ssh.helpers import make_backend
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd

HOLDER_MARK = "sandhub terminal holder"


@pytest.fixture
def backend(sshd: Sshd, base_dir: str, sudo_for_test_user: None) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=True, name="term-box")
    yield ssh
    ssh.close()


def spec() -> SandboxSpec:
    return SandboxSpec(
        sandbox_id="sb_" + secrets.token_hex(6),
        image_reference="",
        cpus=1.0,
        memory_mb=256,
        pids_limit=128,
        network=False,
        env={},
        disk_mb=64,
    )


@pytest.fixture
def isolated(backend: SshBackend) -> Iterator[dict[str, Any]]:
    state = backend.provision(spec())
    assert state["isolated"], f"the host does not isolate: {backend.facts().isolation_missing}"
    try:
        yield state
    finally:
        backend.destroy(state)


def host_processes() -> dict[int, str]:
    """Every process of this machine (the SSH host) and its command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
    return {pid: line.decode("utf-8", "replace") for pid, line in found.items()}


def cgroup_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def test_terminal_state_and_reattach_through_a_new_agent(
    backend: SshBackend, isolated: dict[str, Any]
) -> None:
    terminalcases.state_and_reattach(backend, isolated, lambda: backend.drop_agent(isolated))


def test_terminal_resize_and_two_attachers(backend: SshBackend, isolated: dict[str, Any]) -> None:
    terminalcases.resize(backend, isolated)
    terminalcases.two_attachers(backend, isolated)
    terminalcases.much_output_and_ctrl_c(backend, isolated)


def test_close_kills_everything_and_exit_ends_it(
    backend: SshBackend, isolated: dict[str, Any]
) -> None:
    terminalcases.close_kills_everything(backend, isolated)
    terminalcases.shell_exit_ends_it(backend, isolated)
    terminalcases.bad_ids_refused(backend, isolated)


def test_shell_sessions(backend: SshBackend, isolated: dict[str, Any]) -> None:
    shellcases.state_persists(backend, isolated)
    shellcases.status_streams_cap_and_stdin(backend, isolated)
    shellcases.timeout_keeps_the_shell(backend, isolated)
    shellcases.stuck_shell_is_replaced(backend, isolated)
    shellcases.sessions_are_independent(backend, isolated)
    shellcases.concurrent_runs_take_turns(backend, isolated)


def test_holders_stay_in_the_sandbox_and_die_with_it(backend: SshBackend) -> None:
    state = backend.provision(spec())
    try:
        terminal = terminalcases.open_terminal(backend, state)
        with backend.attach_terminal(state, terminal) as stream:
            stream.write(b"setsid sleep 27182 & echo bg-$((3+4))\n")
            terminalcases.read_until(stream, b"bg-7")
        shellcases.shell(backend, state, "s-left", "sleep 27183 >/dev/null 2>&1 &")
        holders = [pid for pid, line in host_processes().items() if HOLDER_MARK in line]
        ours = [pid for pid in holders if f"/sandhub/{state['sandbox_id']}" in cgroup_of(pid)]
        assert len(ours) == 2, (holders, ours)  # the terminal's and the session's, in its cgroup
        sleeps = [pid for pid, line in host_processes().items() if "sleep 2718" in line]
        assert sleeps and all(state["sandbox_id"] in cgroup_of(pid) for pid in sleeps)
    finally:
        backend.destroy(state)
    left = [line for line in host_processes().values() if "sleep 2718" in line]
    left += [str(pid) for pid in ours if Path(f"/proc/{pid}").exists()]
    assert not left, left


def test_another_tenant_cannot_reach_a_sandboxs_terminals(
    backend: SshBackend, isolated: dict[str, Any]
) -> None:
    """Tenant B (another sandbox, another user, on the same host) tries every way it has to
    A's holder: the same path in its own /tmp, A's sandbox directory on the host, /proc of
    A's processes, the kernel's list of unix sockets. None reaches it."""
    victim = isolated
    terminal = terminalcases.open_terminal(backend, victim)
    shellcases.shell(backend, victim, "s-secret", "export SECRET=victim-only")
    holder = next(
        pid
        for pid, line in host_processes().items()
        if HOLDER_MARK in line and f"/sandhub/{victim['sandbox_id']}" in cgroup_of(pid)
    )
    socket_name = f"/tmp/.sandhub-terminals/{terminal}.sock"
    assert Path(f"/proc/{holder}/root{socket_name}").exists()  # it is there, seen as root
    attacker = backend.provision(spec())
    try:
        assert attacker["isolated"] and attacker["uid"] != victim["uid"]
        probe = ATTACK.replace("SOCKET", socket_name).replace("VICTIM_DIR", victim["dir"])
        result = backend.exec(
            attacker,
            ["python3", "-c", probe, str(holder)],
            cwd="/workspace",
            env={},
            timeout=60,
            output_cap=1 << 16,
        )
        report = result.stdout.decode()
        assert result.exit_code == 0, (report, result.stderr)
        assert "REACHED" not in report and report.count("refused") >= 3, report
        assert "victim socket listed: no" in report, report
        # Through the platform, B's own calls never name A's holders either.
        assert terminal not in {t.terminal_id for t in backend.list_terminals(attacker)}
        with pytest.raises(TerminalGone):
            backend.attach_terminal(attacker, terminal)
        mine = shellcases.shell(backend, attacker, "s-secret", 'echo "${SECRET:-none}"')
        assert mine.stdout == b"none\n"  # the same name is B's own, empty session
    finally:
        backend.destroy(attacker)
    # A's terminal was untouched by all that.
    with backend.attach_terminal(victim, terminal) as stream:
        stream.write(b"echo still-mine-$((6*6))\n")
        terminalcases.read_until(stream, b"still-mine-36")


# Run inside the attacker's sandbox: every way to A's holder it can think of.
ATTACK = r"""
import glob, os, socket, sys
holder = sys.argv[1]
targets = ["SOCKET", "VICTIM_DIR/.sandhub/t/" + os.path.basename("SOCKET"),
           "/proc/%s/root/SOCKET" % holder]
targets += glob.glob("/proc/*/root/tmp/.sandhub-terminals/*.sock")
targets += glob.glob("VICTIM_DIR/**/*.sock", recursive=True)
for path in targets:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        s.sendall(b"I")
        print("REACHED", path, s.recv(4096))
    except OSError as exc:
        print("refused", path, type(exc).__name__)
    finally:
        s.close()
with open("/proc/net/unix") as handle:
    listed = handle.read()
print("victim socket listed:", "yes" if os.path.basename("SOCKET") in listed else "no")
"""


def test_a_host_without_python3_has_no_terminals_and_says_why(plain_backend: SshBackend) -> None:
    state = plain_backend.provision(spec())
    try:
        with pytest.raises(Unsupported, match="python3"):
            plain_backend.open_terminal(state, "t-1", cols=80, rows=24, env={}, idle_timeout=9)
        with pytest.raises(Unsupported, match="python3"):
            shellcases.shell(plain_backend, state, "s-1", "true")
    finally:
        plain_backend.destroy(state)


@pytest.mark.parametrize("own_user", [True, False])
def test_a_sandbox_without_namespaces_keeps_its_holders_in_its_own_directory(
    backend: SshBackend, make_sandbox: Callable[..., dict[str, Any]], own_user: bool
) -> None:
    """Such a sandbox shares the host's /tmp: its holders listen in its 0700 platform
    directory, outside its workspace."""
    state = make_sandbox(own_user=own_user)
    assert not state["isolated"]
    terminalcases.state_and_reattach(backend, state, lambda: backend.drop_agent(state))
    shellcases.state_persists(backend, state)
    session = shellcases.shell(backend, state, "s-where", "true")
    assert session.exit_code == 0
    where = Path(state["meta"], "t")
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    assert (where / "s-where.sock").exists()
    assert not list(Path(state["workspace"]).glob("**/*.sock"))
    backend.close_terminal(state, "s-where")
