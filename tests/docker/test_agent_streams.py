"""The sandbox agent's streams are its own (issue 24): a process of the sandbox user, in a
real Docker sandbox, cannot open the agent's /proc/PID/fd/N to write forged frames into the
result stream the platform reads, nor to read the requests it is sent. Before the agent made
itself non-dumpable, it could: the forged result came back as a teammate's command's."""

from __future__ import annotations

import base64
from typing import Any

import docker

from hosts.backends.agent.link import AgentLink
from hosts.backends.agent.protocol import start_argv
from hosts.backends.docker.names import SANDBOX_USER, container_ref
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


# The first thing a program prints: whether its process is dumpable (PR_GET_DUMPABLE).
DUMPABLE_AT_START = "import ctypes; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"


def test_the_agents_interpreter_is_closed_to_the_sandbox_from_its_first_instruction(
    sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    """BOOTSTRAP's prctl comes ~15 ms after python3 starts: a process of the sandbox that
    watched for a new agent could open its pipes in between. The image's execute-only copy of
    python3 is non-dumpable from its exec, so the agent's command line leaves no such moment;
    the python3 everyone may read is dumpable until it says otherwise."""
    container = engine.containers.get(container_ref(sandbox))

    def first_word(argv: list[str]) -> str:
        code, output = container.exec_run(argv, user=SANDBOX_USER)
        assert code == 0, output
        return output.decode().strip()

    assert first_word(start_argv("python3", DUMPABLE_AT_START)) == "0"
    assert first_word(["python3", "-I", "-c", DUMPABLE_AT_START]) == "1"
