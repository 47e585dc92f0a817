"""The sandbox agent's streams are its own (issue 24): a process of the sandbox user, in a
real Docker sandbox, cannot open the agent's /proc/PID/fd/N to write forged frames into the
result stream the platform reads, nor to read the requests it is sent. Before the agent made
itself non-dumpable, it could: the forged result came back as a teammate's command's."""

from __future__ import annotations

import base64
from typing import Any

import docker

from hosts.backends.agent.link import AgentLink
from tests.docker.agent_helpers import outside, run
from tests.forgery import FORGER, REPORT, VICTIM, forger_command, parse, refused_everything


def test_a_sandbox_process_cannot_forge_or_read_the_agents_streams(
    link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    agent = link.client(sandbox)
    script = base64.b64encode(FORGER.encode()).decode()
    planted = run(
        link,
        sandbox,
        f"echo {script} | base64 -d > .forger.py && {forger_command('.forger.py', agent.pid)}",
    )
    assert planted.exit_code == 0, planted.stderr
    victim = run(link, sandbox, VICTIM, timeout=60)
    report = parse(outside(engine, sandbox, f"cat /workspace/{REPORT}"))
    # The teammate's command got its own result, not the forger's.
    assert (victim.exit_code, victim.stdout) == (0, b"real\n"), (victim, report)
    assert report["agents"] == [str(agent.pid)] and report["listed"]
    assert agent.info["private"] is True
    assert refused_everything(report) == []
    tried = {(fd, how) for _, fd, how, _ in report["refused"]}
    assert {("0", "read"), ("1", "write")} <= tried
    assert run(link, sandbox, "echo after").stdout == b"after\n"
    assert link.client(sandbox) is agent  # the same agent, unharmed
