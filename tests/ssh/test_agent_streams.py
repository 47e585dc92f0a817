"""The sandbox agent's streams are its own (issue 24), on a real sshd: a process of the
sandbox user cannot open the agent's /proc/PID/fd/N to forge results or read requests, in
each kind of SSH sandbox (the login user's, a user of its own, isolated in namespaces of its
own). Before the agent made itself non-dumpable, the forged result was read as a
teammate's command's (tests/forgery.py; the same test on Docker: tests/docker/)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from hosts.backends.agent.link import AgentLink
from hosts.backends.ssh.pool import ConnectionPool
from hosts.backends.ssh.provision import destroy
from tests.forgery import FORGER, REPORT, VICTIM, forger_command, parse, refused_everything
from tests.ssh.helpers import alive, run, wait_for
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd


@pytest.mark.parametrize(
    "kind", [{}, {"own_user": True}, {"isolated": True}], ids=["login-user", "own-user", "isolated"]
)
def test_a_sandbox_process_cannot_forge_or_read_the_agents_streams(
    link: AgentLink, make_sandbox: Callable[..., dict[str, Any]], kind: dict[str, bool]
) -> None:
    sandbox = make_sandbox(**kind)
    agent = link.client(sandbox)
    assert agent.info["private"] is True
    script = base64.b64encode(FORGER.encode()).decode()
    planted = run(
        link,
        sandbox,
        f"echo {script} | base64 -d > .forger.py && {forger_command('.forger.py', agent.pid)}",
    )
    assert planted.exit_code == 0, planted.stderr
    victim = run(link, sandbox, VICTIM, timeout=60)
    report = parse(run(link, sandbox, f"cat {REPORT}").stdout.decode())
    assert (victim.exit_code, victim.stdout) == (0, b"real\n"), (victim, report)
    assert refused_everything(report) == []
    tried = {(fd, how) for _, fd, how, _ in report["refused"]}
    assert {("0", "read"), ("1", "write")} <= tried
    assert run(link, sandbox, "echo after").stdout == b"after\n"
    assert link.client(sandbox) is agent


def test_destroy_still_ends_the_agent_of_a_login_user_sandbox(
    sshd: Sshd, conns: ConnectionPool, base_dir: str, link: AgentLink, make_sandbox
) -> None:
    """The agent's environment is closed to the login user now: destroy finds the agent of
    a sandbox sharing that user by the marker on its command line instead."""
    sandbox = make_sandbox()
    pid = link.client(sandbox).pid
    conn = conns.get(sshd.target())
    assert alive(conn, pid)
    destroy(conn, sandbox, base_dir=base_dir)  # while this link still holds the agent
    wait_for(lambda: not alive(conn, pid), what="the agent's end")
