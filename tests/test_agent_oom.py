"""The OOM killer's order in a sandbox: every command and background job the agent starts
has oom_score_adj 1000 from its first instruction (sandbox/wire.py, oom_first: a /bin/sh shim
where dash runs the command just as Popen would, preexec_fn elsewhere), the agent keeps 0.

Needs the Docker engine and sandhub/sandbox:latest (fixtures from tests/test_agent.py).
"""

# ruff: noqa: F811  (pytest fixtures imported from tests/test_agent.py)
from __future__ import annotations

import time
from typing import Any

import docker
import pytest

from hosts.backends.base import ExecResult
from hosts.backends.docker.agent_link import AgentLink
from tests.test_agent import backend, engine, link, outside, run, sandbox  # noqa: F401
from tests.test_docker_backend import MIB

pytestmark = pytest.mark.docker


def test_commands_go_before_the_agent_when_memory_runs_out(
    link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    # The OOM killer takes the highest score: a command filling the memory goes, the agent
    # (the one process that can still stop it, as nothing new starts then) stays. The score
    # holds from the command's first instruction: bash forks `cat` at once, and cat inherits
    # what bash has then (set by the agent after the spawn, it was 0 now and then under load).
    for _ in range(20):
        assert run(link, sandbox, "cat /proc/self/oom_score_adj").stdout == b"1000\n"
    agent_pid = link.client(sandbox).pid
    assert outside(engine, sandbox, f"cat /proc/{agent_pid}/oom_score_adj") == "0\n"


def test_each_way_a_child_starts_has_the_score_and_runs_as_before(
    link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    # Two ways (sandbox/wire.py, oom_first): a /bin/sh shim where dash runs the command just
    # as Popen would, preexec_fn elsewhere. Either way: the score, and the same command.
    def direct(argv: list[str], env: dict[str, str] | None = None) -> ExecResult:
        return link.exec(sandbox, argv, cwd="/workspace", env=env or {}, timeout=30, output_cap=MIB)

    score = ["cat", "/proc/self/oom_score_adj"]
    assert direct(score).stdout == b"1000\n"  # the shim
    # A name no shell holds, and IFS, which dash sets itself: passed on as they are.
    odd = {"A-B": "1", "IFS": "x", "SANDHUB_TEST": "yes"}
    assert direct(score, odd).stdout == b"1000\n"  # preexec_fn
    passed = set(direct(["env", "-0"], odd).stdout.split(b"\0"))
    assert {b"A-B=1", b"IFS=x", b"PWD=/workspace"} <= passed
    assert direct(["sh", "-c", 'printf "%s|" "$0" "$@"', "zero", "a b", ""]).stdout == b"zero|a b||"
    assert direct(["sh", "-c", "kill -9 $$"]).exit_code == 137
    outside(
        engine,
        sandbox,
        "cd /workspace && printf 'exit 7\\n' > bare && printf '#!/bin/sh\\nexit 8\\n' > hashbang"
        " && printf '#!/bin/sh\\n' > plain && chmod +x bare hashbang",
    )
    assert direct(["./hashbang"]).exit_code == 8
    # As Popen says them: no #! line is ENOEXEC (dash would run it as a script).
    bare = direct(["./bare"])
    assert (bare.exit_code, bare.stderr) == (
        126,
        b"sandhub: cannot run ./bare: Exec format error\n",
    )
    plain = direct(["./plain"])
    assert (plain.exit_code, plain.stderr) == (
        126,
        b"sandhub: cannot run ./plain: Permission denied\n",
    )
    missing = direct(["no-such-program"])
    assert missing.exit_code == 127
    assert missing.stderr == b"sandhub: cannot run no-such-program: No such file or directory\n"
    # A background job's runner too (no PWD in its environment: preexec_fn).
    client = link.client(sandbox)
    client.start_job("oomjob", "/tmp/oomjob", ["sh", "-c", "cat /proc/self/oom_score_adj"], {})
    deadline = time.monotonic() + 10
    while outside(engine, sandbox, "cat /tmp/oomjob/log 2>/dev/null") != "1000\n":
        assert time.monotonic() < deadline, outside(engine, sandbox, "cat /tmp/oomjob/log")
        time.sleep(0.05)
    assert outside(engine, sandbox, f"cat /proc/{client.pid}/oom_score_adj") == "0\n"
