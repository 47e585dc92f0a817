"""SSH sandboxes' tar transfers (hosts/backends/ssh/tarstreams.py, archives.py), background
jobs (jobs.py) and a sandbox with its own Unix user, against a real sshd on loopback
(fixtures: tests/ssh/conftest.py).
"""

from __future__ import annotations

import io
import os
import pwd
import secrets
import shutil
import tarfile
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import BackendError
from hosts.backends.ssh.pool import ConnectionPool
from hosts.backends.ssh.tarstreams import SshTars
from tests.ssh.helpers import (
    make_tar,
    new_link,
    poll_until_done,
    remote_processes,
    run,
    untar,
    wait_for,
)
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd

# -- transfers ---------------------------------------------------------------------------------


def test_tar_upload_and_download_are_byte_identical(
    link: AgentLink, conns: ConnectionPool, sshd: Sshd, sandbox: dict[str, Any]
) -> None:
    tars = SshTars(link, lambda: conns.get(sshd.target()))
    files = {
        "up/readme.txt": "héllo\n".encode(),
        "up/random.bin": os.urandom(3 * 1024 * 1024 + 7),
        "up/sub/bytes.bin": bytes(range(256)) * 64,
        "up/empty": b"",
        "up/run.sh": b"#!/bin/sh\necho ran\n",
    }
    tars.put_files(sandbox, "/workspace", make_tar(files, {"up/run.sh": 0o755}))
    stream = tars.get_files(sandbox, "/workspace/up")
    try:
        assert untar(stream) == files
    finally:
        stream.close()  # type: ignore[attr-defined]
    assert run(link, sandbox, "./up/run.sh").stdout == b"ran\n"
    owner = Path(sandbox["workspace"], "up/random.bin").stat().st_uid
    assert owner == pwd.getpwnam(sandbox["user"]).pw_uid
    # Into a subdirectory that does not exist yet, from a stream that cannot seek.
    tars.put_files(sandbox, "/workspace/deep/er", io.BufferedReader(io.BytesIO(make_tar(files))))
    assert (
        Path(sandbox["workspace"], "deep/er/up/random.bin").read_bytes() == files["up/random.bin"]
    )
    with pytest.raises(FileNotFoundError):
        tars.get_files(sandbox, "/workspace/nothing-here")


def test_tar_upload_refusals(
    link: AgentLink, conns: ConnectionPool, sshd: Sshd, sandbox: dict[str, Any]
) -> None:
    tars = SshTars(link, lambda: conns.get(sshd.target()))
    with pytest.raises(BackendError, match="leaves the destination"):
        tars.put_files(sandbox, "/workspace", make_tar({"../escape.txt": b"x"}))
    # An absolute name lands inside the destination, as on Docker (hosts/backends/archives.py).
    tars.put_files(sandbox, "/workspace", make_tar({"/tmp/absolute.txt": b"x"}))
    assert Path(sandbox["workspace"], "tmp/absolute.txt").read_bytes() == b"x"
    assert not Path("/tmp/absolute.txt").exists()
    with pytest.raises(BackendError, match="under /workspace"):
        tars.put_files(sandbox, "/tmp", make_tar({"a.txt": b"x"}))
    outside = tempfile.mkdtemp(prefix="sandhub-agent-outside-")
    os.chmod(outside, 0o777)
    try:
        run(link, sandbox, f"ln -s {outside} link")
        with pytest.raises(NotADirectoryError, match="symbolic link"):
            tars.put_files(sandbox, "/workspace", make_tar({"link/x.txt": b"x"}))
        assert os.listdir(outside) == []
    finally:
        shutil.rmtree(outside)
    assert sorted(os.listdir(sandbox["workspace"])) == ["link", "tmp"]  # tmp: the absolute name


def test_tar_streams_keep_memory_bounded_and_close_early(
    link: AgentLink, conns: ConnectionPool, sshd: Sshd, sandbox: dict[str, Any]
) -> None:
    tars = SshTars(link, lambda: conns.get(sshd.target()))
    name = f"big-{secrets.token_hex(4)}.bin"
    with tempfile.TemporaryFile() as source:
        with tarfile.open(fileobj=source, mode="w") as archive:
            info = tarfile.TarInfo(name)
            info.size = 40 * 1024 * 1024
            with open("/dev/urandom", "rb") as random:
                archive.addfile(info, io.BufferedReader(random, 1024 * 1024))  # type: ignore[arg-type]
        source.seek(0)
        tracemalloc.start()
        try:
            tars.put_files(sandbox, "/workspace", source)
            total = 0
            stream = tars.get_files(sandbox, f"/workspace/{name}")
            for chunk in stream:
                total += len(chunk)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert Path(sandbox["workspace"], name).stat().st_size == 40 * 1024 * 1024
    assert total >= 40 * 1024 * 1024
    assert peak < 16 * 1024 * 1024, f"{peak} bytes allocated at the peak"
    # A reader that stops after the first chunk: the channel closes, the tar ends.
    stream = tars.get_files(sandbox, f"/workspace/{name}")
    assert next(stream)
    stream.close()  # type: ignore[attr-defined]
    wait_for(lambda: not remote_processes(sshd, name), timeout=10, what="tar to end")


# -- background jobs ---------------------------------------------------------------------------


def test_a_job_survives_its_channel_and_connection(
    sshd: Sshd, conns: ConnectionPool, sandbox: dict[str, Any]
) -> None:
    first = new_link(sshd, conns)
    job = AgentJobs(first).start_background(
        sandbox,
        ["sh", "-c", "echo started; while [ ! -e go ]; do sleep 0.05; done; echo finished; exit 5"],
        cwd="/workspace",
        env={"JOB_VAR": "x"},
        job_id="job-1",
    )
    assert job["dir"] == f"{sandbox['meta']}/jobs/job-1"
    first.close()  # the agent's channel
    conns.drop(sshd.target())  # and the connection
    later = new_link(sshd, conns)  # as another process would, from the job dict alone
    try:
        jobs = AgentJobs(later)
        status = jobs.poll_background(sandbox, job, 4096)
        assert status.running and status.exit_code is None
        later.write_file(sandbox, "/workspace/go", b"")
        status = poll_until_done(jobs, sandbox, job)
        assert (status.exit_code, status.output, status.cancelled) == (
            5,
            b"started\nfinished\n",
            False,
        )
        assert status.output_bytes == len(b"started\nfinished\n")
        assert status.elapsed_seconds is not None and status.elapsed_seconds > 0
    finally:
        later.close()


def test_cancel_leaves_no_process(sshd: Sshd, link: AgentLink, sandbox: dict[str, Any]) -> None:
    token = str(900000 + secrets.randbelow(99999))
    jobs = AgentJobs(link)
    script = f"sleep {token}1 & setsid sleep {token}2 & trap '' TERM; echo ready; sleep {token}3"
    job = jobs.start_background(
        sandbox, ["sh", "-c", script], cwd="/workspace", env={}, job_id="job-cancel"
    )
    wait_for(lambda: jobs.poll_background(sandbox, job, 100).output == b"ready\n")
    sleeps = [line for line in remote_processes(sshd, token) if line.split()[2] == "sleep"]
    assert len(sleeps) == 3, sleeps
    jobs.cancel_background(sandbox, job)
    assert remote_processes(sshd, token) == []
    status = poll_until_done(jobs, sandbox, job)
    assert status.cancelled and not status.running
    jobs.cancel_background(sandbox, job)  # idempotent


# -- a sandbox with its own user ---------------------------------------------------------------

# -- a sandbox with its own user ---------------------------------------------------------------


@pytest.mark.usefixtures("sudo_for_test_user")
def test_a_sandbox_with_its_own_user(
    sshd: Sshd,
    conns: ConnectionPool,
    link: AgentLink,
    make_sandbox: Callable[..., dict[str, Any]],
) -> None:
    state = make_sandbox(own_user=True)
    result = run(link, state, "id -un; echo $HOME")
    assert result.stdout.decode().split() == [state["user"], state["workspace"]], result
    link.write_file(state, "/workspace/mine.txt", b"private")
    uid = pwd.getpwnam(state["user"]).pw_uid
    assert Path(state["workspace"], "mine.txt").stat().st_uid == uid
    # Another sandbox (the login user's) is out of its reach: its files and its processes.
    other = make_sandbox()
    link.write_file(other, "/workspace/secret.txt", b"theirs")
    other_agent = link.client(other).pid
    denied = run(link, state, f"cat {other['workspace']}/secret.txt; kill -0 {other_agent}")
    assert denied.stdout == b"" and denied.exit_code != 0
    assert b"Permission denied" in denied.stderr and b"not permitted" in denied.stderr, denied
    tars = SshTars(link, lambda: conns.get(sshd.target()))
    tars.put_files(state, "/workspace", make_tar({"t/a.bin": b"\0\1\2"}))
    assert untar(tars.get_files(state, "/workspace/t")) == {"t/a.bin": b"\0\1\2"}
    jobs = AgentJobs(link)
    job = jobs.start_background(state, ["id", "-un"], cwd="/workspace", env={}, job_id="who")
    status = poll_until_done(jobs, state, job)
    assert (status.exit_code, status.output) == (0, f"{state['user']}\n".encode())
