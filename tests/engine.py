"""A Docker client for tests that make containers under their own Sandhub instance label."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker

from hosts.backends.base import LABEL_INSTANCE
from hosts.backends.docker import DockerBackend
from hosts.models import Host


@contextlib.contextmanager
def engine_cleaning_up(instance: str) -> Iterator[docker.DockerClient]:
    """The local engine; on exit, removes whatever a failed test left under `instance` only."""
    client = docker.from_env()
    cleaner = DockerBackend(
        Host(name="local", kind="docker", endpoint="unix:///var/run/docker.sock")
    )
    try:
        yield client
    finally:
        for container in client.containers.list(
            all=True, filters={"label": f"{LABEL_INSTANCE}={instance}"}
        ):
            label = container.labels.get("org.sandhub.sandbox", "")
            container.remove(force=True, v=True)
            # destroy also removes the sandbox's volume, network and disk image.
            with contextlib.suppress(Exception):
                cleaner.destroy({"sandbox_id": label})
        cleaner.close()
        client.close()
