"""Background jobs keep their files out of /workspace (real Docker engine, the REST API in
process): after a job, no listing, download, archive or sync manifest of /workspace shows a
.sandhub folder, and the job's log still polls and a job still cancels. A job started before
the move (its dict naming /workspace/.sandhub/jobs/...) still polls and cancels too."""

from __future__ import annotations

import io
import tarfile
import time

import pytest
from rest_framework.test import APIClient

from hosts.backends import get_backend
from sandboxes import services
from sandboxes.models import Sandbox

pytestmark = pytest.mark.docker
API = "/api/v1"
LEGACY_DIR = "/workspace/.sandhub/jobs"  # where jobs went before (a job dict may still say so)


def until_ended(principal, sandbox_id: str, command_id: int, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        check = services.check_background(principal, sandbox_id, command_id)
        if not check.running:
            return check
        assert time.monotonic() < deadline, f"still running after {timeout:g} s: {check}"
        time.sleep(0.2)


def names_in_archive(chunks) -> list[str]:
    data = b"".join(chunks)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return archive.getnames()


def test_a_jobs_files_stay_out_of_the_workspace(world, shared_sandbox):
    principal = world.principal()
    started = services.start_background(principal, shared_sandbox, "echo job-output; touch made")
    check = until_ended(principal, shared_sandbox, started.id)
    assert (check.status, check.output) == ("succeeded", "job-output\n")
    assert not check.log_path.startswith("/workspace"), check.log_path
    # The log itself is still there for whoever asks for it by its path.
    assert services.read_file(principal, shared_sandbox, check.log_path).content == (
        b"job-output\n"
    )

    listed = [entry.name for entry in services.list_files(principal, shared_sandbox)]
    assert "made" in listed and ".sandhub" not in listed
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys['alice']}")
    response = client.get(f"{API}/sandboxes/{shared_sandbox}/files/", {"path": "/workspace"})
    assert response.status_code == 200, response.content
    rest_names = [entry["name"] for entry in response.json()["results"]]
    assert "made" in rest_names and ".sandhub" not in rest_names

    downloaded = services.download_files(principal, shared_sandbox, ["/workspace"])
    assert any(path == "/workspace/made" for path, _ in downloaded)
    assert not [path for path, _ in downloaded if "/.sandhub" in path]
    stream = services.open_archive_stream(principal, shared_sandbox, "/workspace")
    try:
        archived = names_in_archive(stream)
    finally:
        stream.close()
    assert "workspace/made" in archived and not [n for n in archived if ".sandhub" in n]
    manifest = services.tree_manifest(principal, shared_sandbox, "/workspace")
    paths = [entry.path for entry in manifest.entries]
    assert "made" in paths and not [p for p in paths if ".sandhub" in p]


def test_a_running_job_out_of_the_workspace_cancels(world, shared_sandbox):
    principal = world.principal()
    started = services.start_background(principal, shared_sandbox, "echo up; sleep 600")
    deadline = time.monotonic() + 20
    while "up" not in services.check_background(principal, shared_sandbox, started.id).output:
        assert time.monotonic() < deadline, "the job never printed"
        time.sleep(0.1)
    cancelled = services.cancel_background(principal, shared_sandbox, started.id)
    assert (cancelled.status, cancelled.running) == ("cancelled", False)
    # Exactly what the job wrote: the job's shell (dash) reports a command killed by a signal
    # ("Terminated") on its own stderr, which is not the log while it waits (it was, and that
    # line came or not as the cancel's SIGTERM reached the log's keeper first or not).
    assert cancelled.output == "up\n"


def test_a_job_started_in_the_old_place_still_polls_and_cancels(world, shared_sandbox):
    sandbox = Sandbox.objects.get(public_id=shared_sandbox)
    backend = get_backend(sandbox.host)
    state = sandbox.backend_state
    # What the code before the move did: the job's directory under the workspace.
    old = backend.start_background(
        {**state, "jobs_dir": LEGACY_DIR},
        ["sh", "-c", "echo old-job; sleep 600"],
        cwd="/workspace",
        env={},
        job_id="legacyjob",
    )
    assert old["dir"] == f"{LEGACY_DIR}/legacyjob"
    try:
        deadline = time.monotonic() + 20
        status = backend.poll_background(state, old, 4096)
        while status.output != b"old-job\n":
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
            status = backend.poll_background(state, old, 4096)
        assert status.running
    finally:
        backend.cancel_background(state, old)
    status = backend.poll_background(state, old, 4096)
    assert not status.running and status.cancelled
    assert status.output == b"old-job\n"  # nothing of the job's shell (see above)
