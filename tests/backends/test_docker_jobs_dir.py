"""Where a Docker sandbox's new background jobs go: the jobs tmpfs its state names from
provision on; a sandbox made before it (no such mount, no such key) uses /tmp. Never the
workspace."""

from __future__ import annotations

from hosts.backends.docker.agent import DockerAgentPlace
from hosts.backends.docker.names import JOBS_DIR, LEGACY_JOBS_DIR, WORKSPACE


def test_new_and_old_sandboxes_keep_jobs_out_of_the_workspace() -> None:
    place = DockerAgentPlace.__new__(DockerAgentPlace)  # job_dir needs no engine
    new = place.job_dir({"container_id": "c", "jobs_dir": JOBS_DIR}, "7-ab")
    old = place.job_dir({"container_id": "c"}, "7-ab")
    assert new == "/run/sandhub/jobs/7-ab" and old == f"{LEGACY_JOBS_DIR}/7-ab"
    assert not new.startswith(WORKSPACE) and not old.startswith(WORKSPACE)
