"""Telling an OOM kill from a plain SIGKILL: the words the sandbox appends and the platform
reads are the same, and the classification needs both the exit code 137 and the note."""

from __future__ import annotations

import subprocess

from hosts.backends.agent.inside import oom
from hosts.backends.jobscripts import _OOM_COUNT, OOM_JOB_NOTE
from sandboxes.contract.outcomes import OOM_NOTE, killed_for_memory


def test_the_sandbox_and_the_platform_use_the_same_words() -> None:
    assert oom.OOM_NOTE == OOM_NOTE
    assert OOM_JOB_NOTE.startswith(OOM_NOTE)
    assert OOM_NOTE.encode() in oom.oom_note()


def test_only_a_sigkill_with_the_note_is_out_of_memory() -> None:
    said = f"Traceback ...\n{OOM_NOTE} (limit 128 MB); use a bigger sandbox or less memory\n"
    assert killed_for_memory(137, said)
    assert not killed_for_memory(137, "Killed\n")  # kill -9: no note
    assert not killed_for_memory(1, said)
    assert not killed_for_memory(None, said)


def test_a_sigkill_without_a_new_oom_kill_is_not_called_one(monkeypatch) -> None:
    counts = iter([3])
    monkeypatch.setattr(oom, "oom_kills", lambda: next(counts))
    assert not oom.oom_killed(137, 3)  # the count did not move: someone's kill -9
    counts = iter([4])
    assert oom.oom_killed(137, 3)
    assert not oom.oom_killed(0, 3) and not oom.oom_killed(137, None)


def test_the_job_runner_reads_the_count_with_builtins_and_keeps_its_arguments() -> None:
    script = _OOM_COUNT + 'oom_count; echo "$oom|$#|$1"'
    out = subprocess.run(["sh", "-c", script, "sh", "a b", "c"], capture_output=True, text=True)
    count, argc, first = out.stdout.rstrip("\n").split("|")
    assert (argc, first) == ("2", "a b")
    assert count == "" or count.isdigit(), out.stdout
