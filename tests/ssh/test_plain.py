"""SSH hosts without python3 (hosts/backends/ssh/plain.py): commands, background jobs and
listings over plain exec channels, through SshBackend's fallback, against a real sshd on
loopback (fixtures: tests/ssh/conftest.py).

How the agent is made unavailable: the backend's agent link is built with a python that is
not installed (ABSENT_PYTHON, `python3-absent`), which is what a host without python3 looks
like to it (the start fails with exit 127 -> AgentUnavailable), so every call below goes the
plain way. The Host and its Credential are unsaved model objects: no database is needed.
"""

from __future__ import annotations

import hashlib
import io
import secrets
import tarfile
import time
from collections.abc import Callable
from typing import Any

import pytest

from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import JobStatus
from hosts.backends.ssh.backend import SshBackend
from tests.ssh.helpers import ABSENT_PYTHON, CAP, remote_processes, wait_for
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd


@pytest.fixture
def backend(plain_backend: SshBackend) -> SshBackend:
    """The backend of a host without python3 (`plain_backend`, tests/ssh/conftest.py)."""
    return plain_backend


def run(backend: SshBackend, state: dict[str, Any], script: str, **options: Any) -> Any:
    options = {"cwd": "/workspace", "env": {}, "timeout": 30, "output_cap": CAP, **options}
    return backend.exec(state, ["sh", "-c", script], **options)


def poll_until_done(
    poll: Callable[[], JobStatus], timeout: float = 30, what: str = "the job's end"
) -> JobStatus:
    give_up = time.monotonic() + timeout
    while True:
        status = poll()
        if not status.running:
            return status
        assert time.monotonic() < give_up, f"gave up waiting for {what}: {status}"
        time.sleep(0.05)


def token() -> str:
    """A sleep length no other process on the machine has: `sleep <token>` finds ours."""
    return str(800000 + secrets.randbelow(99999))


# -- commands ----------------------------------------------------------------------------------


def test_the_agent_is_unavailable_and_commands_run_plain(
    backend: SshBackend,
    sandbox: dict[str, Any],
) -> None:
    result = backend.exec(
        sandbox,
        ["sh", "-c", 'pwd; echo "$HOME|$SANDHUB_SANDBOX_ID|$SANDBOX_VAR|$CALL_VAR"; cat "$1"', "x"]
        + ["/workspace/f"],
        cwd="/workspace",
        env={"CALL_VAR": "from-the-call"},
        timeout=10,
        output_cap=CAP,
    )
    # The agent never ran: the start failed for want of its python, and that is remembered.
    with pytest.raises(AgentUnavailable, match=ABSENT_PYTHON):
        backend.agents.client(sandbox)
    workspace = sandbox["workspace"]
    assert result.exit_code == 1, result  # /workspace/f was mapped, and is missing
    assert result.stdout.decode().splitlines() == [
        workspace,
        f"{workspace}|{sandbox['sandbox_id']}|from-the-sandbox|from-the-call",
    ]
    assert f"{workspace}/f" in result.stderr.decode()
    env = run(backend, sandbox, "env").stdout.decode()
    assert "SSH_CONNECTION" not in env and "SANDHUB_EXEC_ID=" in env, env


def test_exit_code_streams_and_live_output(
    backend: SshBackend,
    sandbox: dict[str, Any],
) -> None:
    seen: list[tuple[float, str, bytes]] = []
    started = time.monotonic()

    def on_output(stream: str, chunk: bytes) -> None:
        seen.append((time.monotonic() - started, stream, chunk))

    result = run(backend, sandbox, "echo one; sleep 1; echo two >&2; exit 7", on_output=on_output)
    assert (result.exit_code, result.stdout, result.stderr) == (7, b"one\n", b"two\n")
    assert not result.timed_out and result.duration_seconds >= 1
    assert [(stream, chunk) for _, stream, chunk in seen] == [
        ("stdout", b"one\n"),
        ("stderr", b"two\n"),
    ]
    assert seen[0][0] < 0.9, "the first line came only at the end, not live"


def test_stdin_small_and_large(backend: SshBackend, sandbox: dict[str, Any]) -> None:
    assert run(backend, sandbox, "cat", stdin=b"abc").stdout == b"abc"
    big = secrets.token_bytes(3 * 1024 * 1024)  # over Docker's 64 KiB: the channel carries it
    result = run(backend, sandbox, "sha256sum", stdin=big)
    assert result.stdout.split()[0].decode() == hashlib.sha256(big).hexdigest(), result
    assert run(backend, sandbox, "cat; echo end").stdout == b"end\n"  # no stdin: at its end


def test_50_mb_of_output_is_capped_with_true_counts(
    backend: SshBackend,
    sandbox: dict[str, Any],
) -> None:
    cap = 1024 * 1024
    script = "head -c 50000000 /dev/zero; head -c 3000000 /dev/zero >&2"
    result = run(backend, sandbox, script, output_cap=cap, timeout=60)
    assert result.exit_code == 0, result
    assert (result.stdout_bytes, result.stderr_bytes) == (50_000_000, 3_000_000)
    assert result.stdout_truncated and result.stderr_truncated
    assert cap <= len(result.stdout) < cap + 100 and cap <= len(result.stderr) < cap + 100


def test_a_timeout_kills_the_whole_tree(
    backend: SshBackend,
    sshd: Sshd,
    make_sandbox: Callable[..., dict[str, Any]],
) -> None:
    for own_user in (False, True):
        state = make_sandbox(own_user=own_user)
        a, b, c = token(), token(), token()
        script = f"sleep {a} & (sleep {b} >/dev/null 2>&1 &) ; setsid sleep {c} & sleep {a}"
        result = run(backend, state, script, timeout=1)
        assert result.timed_out and result.exit_code in (124, 137), result
        assert result.duration_seconds < 8, result
        # The wrapper returned only once they were reaped: nothing to wait for.
        for needle in (a, b, c):
            assert remote_processes(sshd, f"sleep {needle}") == [], (own_user, needle)
        if own_user:
            whoami = run(backend, state, "id -un").stdout.decode().strip()
            assert whoami == state["user"] != sshd.username


def test_a_failing_callback_kills_the_command(
    backend: SshBackend,
    sshd: Sshd,
    sandbox: dict[str, Any],
) -> None:
    mark = token()

    def on_output(stream: str, chunk: bytes) -> None:
        raise RuntimeError("the caller went away")

    with pytest.raises(RuntimeError, match="went away"):
        run(backend, sandbox, f"echo hi; sleep {mark}", on_output=on_output)
    # KILL_MARKED from a second command: by the exec's marker.
    wait_for(lambda: remote_processes(sshd, f"sleep {mark}") == [], 10, "the kill")


# -- background jobs ---------------------------------------------------------------------------


def start(backend: SshBackend, state: dict[str, Any], script: str, **options: Any) -> Any:
    job_id = "job-" + secrets.token_hex(4)
    options = {"cwd": "/workspace", "env": {"JOB_VAR": "v"}, "job_id": job_id, **options}
    return backend.start_background(state, ["sh", "-c", script], **options)


def test_a_background_job_runs_to_its_exit_code(
    backend: SshBackend,
    sandbox: dict[str, Any],
) -> None:
    job = start(backend, sandbox, 'echo "out $JOB_VAR"; pwd; echo err >&2; sleep 1; exit 3')
    assert job["dir"].startswith(sandbox["meta"] + "/jobs/") and job["pid"] > 1
    assert backend.poll_background(sandbox, job, 4096).running
    status = poll_until_done(lambda: backend.poll_background(sandbox, job, 4096))
    assert (status.exit_code, status.cancelled, status.problem) == (3, False, "")
    assert status.output == f"out v\n{sandbox['workspace']}\nerr\n".encode()
    assert status.output_bytes == len(status.output)
    assert status.elapsed_seconds is not None and status.elapsed_seconds >= 1
    # A job's own time limit: 124 from `timeout`.
    limited = start(backend, sandbox, "sleep 30", timeout=0.5)
    status = poll_until_done(lambda: backend.poll_background(sandbox, limited, 100))
    assert status.exit_code == 124, status


def test_a_cancelled_job_leaves_no_process(
    backend: SshBackend,
    sshd: Sshd,
    sandbox: dict[str, Any],
) -> None:
    a, b = token(), token()
    # One that ignores SIGTERM, one that left the session: both must go.
    job = start(backend, sandbox, f"trap '' TERM; setsid sleep {b} & echo started; sleep {a}")
    both = (f"sleep {a}", f"sleep {b}")
    wait_for(lambda: all(remote_processes(sshd, n) for n in both), 10, "the job's sleeps")
    backend.cancel_background(sandbox, job)
    assert [remote_processes(sshd, n) for n in both] == [[], []]
    status = poll_until_done(lambda: backend.poll_background(sandbox, job, 4096), 10)
    assert status.cancelled and not status.running
    assert b"started" in status.output
    backend.cancel_background(sandbox, job)  # idempotent


def test_either_path_polls_and_cancels_the_others_jobs(
    backend: SshBackend,
    sshd: Sshd,
    link: AgentLink,
    sandbox: dict[str, Any],
) -> None:
    agent_jobs = AgentJobs(link)  # a working agent on the same sandbox
    plain_started = start(backend, sandbox, "echo plain; exit 5")
    status = poll_until_done(lambda: agent_jobs.poll_background(sandbox, plain_started, 100))
    assert (status.exit_code, status.output) == (5, b"plain\n")
    mark = token()
    agent_started = agent_jobs.start_background(
        sandbox, ["sh", "-c", f"echo agent; sleep {mark}"], cwd="/workspace", env={}, job_id="a1"
    )
    wait_for(lambda: backend.poll_background(sandbox, agent_started, 100).output == b"agent\n")
    backend.cancel_background(sandbox, agent_started)
    assert remote_processes(sshd, f"sleep {mark}") == []
    assert agent_jobs.poll_background(sandbox, agent_started, 100).cancelled


# -- listings ----------------------------------------------------------------------------------


def test_list_dir(backend: SshBackend, sandbox: dict[str, Any]) -> None:
    setup = "mkdir -p sub && printf 12345 > sub/five && ln -s five sub/link && mkdir sub/d"
    assert run(backend, sandbox, setup).exit_code == 0
    entries = {e.name: e for e in backend.list_dir(sandbox, "/workspace/sub")}
    assert {n: (e.kind, e.path) for n, e in entries.items()} == {
        "five": ("file", "/workspace/sub/five"),
        "link": ("link", "/workspace/sub/link"),
        "d": ("dir", "/workspace/sub/d"),
    }
    assert entries["five"].size == 5 and entries["five"].mtime > time.time() - 60
    (one,) = backend.list_dir(sandbox, "/workspace/sub/five")
    assert (one.name, one.path, one.size) == ("five", "/workspace/sub/five", 5)
    with pytest.raises(FileNotFoundError):
        backend.list_dir(sandbox, "/workspace/missing")


def test_uploads_and_downloads_without_the_agent(
    backend: SshBackend,
    sandbox: dict[str, Any],
) -> None:
    payload = secrets.token_bytes(200_000)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("deep/er/blob.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    backend.put_files(sandbox, "/workspace", archive.getvalue())
    stream = backend.get_files(sandbox, "/workspace/deep/er/blob.bin")
    try:
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream)), mode="r") as tar:
            member = tar.getmember("blob.bin")
            assert tar.extractfile(member).read() == payload  # type: ignore[union-attr]
    finally:
        stream.close()  # type: ignore[attr-defined]
