"""The plain command path after the wrapper's sweep ran out of time (fallback/commands.py):
a second sweep from a new exec decides whether the call answers or fails.

In a sandbox with a tenth of a CPU on a loaded CI host, a fork bomb outran the wrapper's
sweep (10 s); the call failed although the sweep run after it ended every process."""

from __future__ import annotations

from typing import Any

import pytest

from hosts.backends.base import BackendError
from hosts.backends.execscripts import KILL_MARKED, NOTICE_PREFIX, NOTICE_SWEEP, WRAPPER_FAILED
from hosts.backends.fallback.commands import MARKER_ENV, PlainCommands

GAVE_UP = "the command ended (status 3), but processes it left behind could not be stopped"


class ScriptedExec:
    """Answers the wrapper with the sweep's notice, and KILL_MARKED with `second_sweep`."""

    max_stdin = None

    def __init__(self, second_sweep: int) -> None:
        self.second_sweep = second_sweep
        self.kills: list[str] = []

    def run(self, state: dict[str, Any], argv: list[str], **options: Any) -> int | None:
        if argv[2] == KILL_MARKED:
            self.kills.append(argv[-1])
            return self.second_sweep
        marker = options["env"][MARKER_ENV]
        notice = f"\n{NOTICE_PREFIX} {marker} {NOTICE_SWEEP}: {GAVE_UP} within 10 s\n"
        options["output"]("stdout", b"out\n")
        options["output"]("stderr", notice.encode())
        return WRAPPER_FAILED


class Place:
    def key(self, state: dict[str, Any]) -> str | None:
        return "sandbox"

    def host_path(self, state: dict[str, Any], path: str) -> str:
        return path

    def after_missing(self, state: dict[str, Any]) -> None:
        pass


def run(primitive: ScriptedExec) -> Any:
    commands = PlainCommands(primitive, Place())  # type: ignore[arg-type]
    return commands.exec({}, ["sh", "-c", "bomb"], cwd="/workspace", env={}, timeout=5.0,
                         output_cap=1024)  # fmt: skip


def test_a_second_sweep_that_ends_them_lets_the_command_answer_with_its_own_status():
    primitive = ScriptedExec(second_sweep=0)
    result = run(primitive)
    assert result.exit_code == 3 and result.stdout == b"out\n"
    assert len(primitive.kills) == 1  # the command's own marker


def test_a_second_sweep_that_fails_too_fails_the_call_saying_why():
    primitive = ScriptedExec(second_sweep=1)
    with pytest.raises(BackendError, match="could not be stopped"):
        run(primitive)
    assert len(primitive.kills) == 1
