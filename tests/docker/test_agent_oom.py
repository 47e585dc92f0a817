"""The OOM killer's order in a sandbox: every command and background job the agent starts
has oom_score_adj 1000 from its first instruction (inside/oom.py, oom_first: bash -c reads it
from BASH_ENV, a /bin/sh shim where dash runs the command just as Popen would, preexec_fn
elsewhere), the agent keeps 0.

Needs the Docker engine and sandhub/sandbox:latest (fixtures: tests/docker/conftest.py).
"""

from __future__ import annotations

import os
import time
from typing import Any

import docker
import pytest

from hosts.backends.agent.inside import oom
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import ExecResult
from tests.docker.agent_helpers import outside, run
from tests.memory import MIB


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
    # Two of the ways (inside/oom.py, oom_first): a /bin/sh shim where dash runs the command just
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


def test_bash_sets_the_score_itself_and_the_command_sees_nothing_of_it(
    link: AgentLink, sandbox: dict[str, Any], engine: docker.DockerClient
) -> None:
    # bash -c reads the score from BASH_ENV (a sealed memfd of the agent's) before the
    # command: same score, and $_, $?, the environment and the line numbers as without it.
    seen = run(link, sandbox, 'echo "[$_] $? ${BASH_ENV-unset}"; cat /proc/self/oom_score_adj')
    assert seen.stdout == b"[bash] 0 unset\n1000\n"
    assert b"BASH_ENV" not in run(link, sandbox, "env; sh -c env").stdout
    assert run(link, sandbox, "nope").stderr == b"bash: line 1: nope: command not found\n"
    # What the command may pass itself is still bash's own to read.
    outside(engine, sandbox, "echo 'echo from-rc' > /workspace/rc")
    mine = link.exec(
        sandbox,
        ["bash", "-c", "cat /proc/self/oom_score_adj"],
        cwd="/workspace",
        env={"BASH_ENV": "/workspace/rc"},
        timeout=30,
        output_cap=MIB,
    )
    assert mine.stdout == b"from-rc\n1000\n"
    # bash reads the script from its own copy of the agent's memfd, closed before the
    # command starts (the agent's own fds are closed to the sandbox user: guard.py).
    assert run(link, sandbox, "ls /proc/self/fd").stdout == b"0\n1\n2\n3\n"
    agent_pid = link.client(sandbox).pid
    assert "Permission denied" in outside(engine, sandbox, f"ls /proc/{agent_pid}/fd 2>&1")
    assert run(link, sandbox, "cat /proc/self/oom_score_adj").stdout == b"1000\n"


def test_nothing_can_change_what_bash_reads() -> None:
    # The memfd is sealed: not even its holder (here, this process) may write to it.
    fd = oom._make_bash_env()
    assert fd >= 0
    try:
        with pytest.raises(PermissionError):
            os.write(os.open(f"/proc/self/fd/{fd}", os.O_WRONLY), b"echo pwned\n")
        script = os.pread(fd, 4096, 0)
        assert script.startswith(b"builtin echo 1000") and f"exec {fd}<&-".encode() in script
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "argv, env, way",
    [
        (["bash", "-c", "true"], {}, "bash_env"),
        (["bash", "-c", "true", "zero", "one"], {}, "bash_env"),
        (["bash", "-c", "true"], {"BASH_ENV": "/x"}, "shim"),  # the caller's own
        (["bash", "-c", "true"], {"_": "/x"}, "shim"),  # $_ would start as it
        (["bash", "-c", "true"], {"BASH_FUNC_builtin%%": "() { :; }"}, "preexec"),
        (["bash", "-c", "true"], {"POSIXLY_CORRECT": "1"}, "shim"),
        (["bash", "-lc", "true"], {}, "shim"),  # a login shell reads its profile first
        (["/bin/bash", "-c", "true"], {}, "shim"),  # $_ starts as argv[0]: only "bash"
        (["sh", "-c", "true"], {}, "shim"),
    ],
)
def test_the_way_each_child_starts(argv: list[str], env: dict[str, str], way: str) -> None:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PWD": "/", **env}
    new_argv, options = oom.oom_first(argv, {"cwd": "/", "env": env})
    if way == "bash_env":
        assert new_argv == argv and "preexec_fn" not in options
        assert options["env"] == {**env, "BASH_ENV": options["env"]["BASH_ENV"]}
        assert options["env"]["BASH_ENV"].startswith("/proc/")
    elif way == "shim":
        assert new_argv[:2] == ["/bin/sh", "-c"] and new_argv[4:] == argv
        assert options["env"] == env
    else:
        assert new_argv == argv and options["preexec_fn"] is oom._oom_first_in_child
