"""The agent's terminal_* operations, with the agent and its holders as local processes (no
engine, no sshd): what they refuse, where they listen, and how a gone holder is said. The
terminals' behaviour in a real sandbox: tests/docker/test_terminals.py, tests/ssh/."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from hosts.backends.agent import terminals
from hosts.backends.agent.calls import AgentRefused, Call
from hosts.backends.agent.client import AgentClient
from hosts.backends.base import TerminalGone


@pytest.fixture
def base() -> Iterator[str]:
    """A short directory (unix socket paths are limited to 107 bytes)."""
    path = tempfile.mkdtemp(prefix="sht-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def call(agent: AgentClient, body: dict[str, Any]) -> dict[str, Any]:
    return agent._call(body, lambda rid: Call(agent, rid), 30).body


def open_shell(agent: AgentClient, directory: str, name: str, **extra: Any) -> dict[str, Any]:
    return terminals.open_(agent, directory, name, mode="shell", cwd="/", env={}, **extra)


@pytest.mark.parametrize("bad", ["../x", "a/b", "x" * 49, "", "Up", "-x", "a.b", None, 7])
def test_ids_that_could_name_a_path_are_refused_by_the_agent(
    agent: AgentClient, base: str, bad: Any
) -> None:
    for op in ("terminal_open", "terminal_attach", "terminal_close"):
        with pytest.raises(AgentRefused) as refused:
            call(agent, {"op": op, "dir": f"{base}/t", "id": bad, "mode": "shell"})
        assert refused.value.kind == "invalid"
    assert not os.path.exists(f"{base}/x.sock") and os.listdir(base) in ([], ["t"])


def test_the_directory_is_made_private_and_must_be_the_users_own(
    agent: AgentClient, base: str
) -> None:
    directory = f"{base}/t"
    opened = open_shell(agent, directory, "s-1")
    try:
        assert opened["pid"] > 0 and not opened["existed"]
        assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.lstat(f"{directory}/s-1.sock").st_mode) == 0o600
        with pytest.raises(FileExistsError):
            open_shell(agent, directory, "s-1")
        assert open_shell(agent, directory, "s-1", exist_ok=True) == {
            "pid": opened["pid"],
            "existed": True,
            "kind": "shell",
        }
        [info] = terminals.listing(agent, directory)
        assert (info.terminal_id, info.kind, info.pid) == ("s-1", "shell", opened["pid"])
    finally:
        assert terminals.close(agent, directory, "s-1")
    assert not terminals.close(agent, directory, "s-1")
    assert terminals.listing(agent, directory) == []
    os.symlink(directory, f"{base}/link")
    os.mkdir(f"{base}/other")
    os.chown(f"{base}/other", 65534, 65534)  # another user's
    for where in (f"{base}/link", f"{base}/other"):
        with pytest.raises(PermissionError):
            open_shell(agent, where, "s-2")
    with pytest.raises(AgentRefused):
        open_shell(agent, "relative/dir", "s-2")


def test_a_missing_or_dead_holder_is_terminal_gone(agent: AgentClient, base: str) -> None:
    with pytest.raises(TerminalGone):
        terminals.attach(agent, f"{base}/none", "t-1", timeout=5)
    os.mkdir(f"{base}/t", 0o700)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(f"{base}/t/t-1.sock")  # a holder that died: its socket stays, nobody listens
    stale.close()
    with pytest.raises(TerminalGone):
        terminals.attach(agent, f"{base}/t", "t-1", timeout=5)
    assert not os.path.exists(f"{base}/t/t-1.sock")  # the stale socket is cleared
    assert terminals.listing(agent, f"{base}/t") == []
