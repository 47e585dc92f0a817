"""An isolated sandbox on a real sshd keeps its background jobs' files beside its workspace
(`<sandbox dir>/.sandhub/jobs`, bound into its mount namespace at the same path), never in
/workspace: a listing, a download and the sync manifest of /workspace show no .sandhub; the
job's log polls and a job cancels."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Iterator

import pytest

from hosts.backends.ssh.backend import SshBackend
from tests.ssh.helpers import make_backend
from tests.ssh.sshd import Sshd
from tests.ssh.test_isolated import spec

pytestmark = pytest.mark.sshd


@pytest.fixture
def backend(sshd: Sshd, base_dir: str, sudo_for_test_user: None) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=True, name="jobs-box")
    yield ssh
    ssh.close()


def until_done(backend: SshBackend, state: dict, job: dict, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    status = backend.poll_background(state, job, 4096)
    while status.running:
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
        status = backend.poll_background(state, job, 4096)
    return status


def test_jobs_of_an_isolated_sandbox_stay_out_of_its_workspace(backend: SshBackend) -> None:
    state = backend.provision(spec())
    try:
        assert state["isolated"]
        job = backend.start_background(
            state,
            ["sh", "-c", "echo job-output; touch made"],
            cwd="/workspace",
            env={},
            job_id="filesjob",
        )
        assert not job["dir"].startswith(state["dir"] + "/workspace")
        assert not job["dir"].startswith("/workspace")
        status = until_done(backend, state, job)
        assert (status.exit_code, status.output) == (0, b"job-output\n")

        names = [entry.name for entry in backend.list_dir(state, "/workspace")]
        assert "made" in names and ".sandhub" not in names
        data = b"".join(backend.get_files(state, "/workspace"))
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            archived = archive.getnames()
        assert any(name.endswith("made") for name in archived)
        assert not [name for name in archived if ".sandhub" in name]
        page = backend.manifest(state, "/workspace", after=None, limit=100)
        paths = [entry.path for entry in page.entries]
        assert "made" in paths and not [p for p in paths if ".sandhub" in p]

        running = backend.start_background(
            state, ["sh", "-c", "echo up; sleep 600"], cwd="/workspace", env={}, job_id="slowjob"
        )
        deadline = time.monotonic() + 20
        while backend.poll_background(state, running, 4096).output != b"up\n":
            assert time.monotonic() < deadline, "the job never printed"
            time.sleep(0.1)
        backend.cancel_background(state, running)
        cancelled = backend.poll_background(state, running, 4096)
        assert not cancelled.running and cancelled.cancelled
    finally:
        backend.destroy(state)
