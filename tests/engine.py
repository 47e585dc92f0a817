"""A Docker client for tests that make containers under their own Sandhub instance label."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import docker

from hosts.backends.base import LABEL_INSTANCE


@contextlib.contextmanager
def engine_cleaning_up(instance: str) -> Iterator[docker.DockerClient]:
    """The local engine; on exit, removes whatever a failed test left under `instance` only."""
    client = docker.from_env()
    try:
        yield client
    finally:
        for container in client.containers.list(
            all=True, filters={"label": f"{LABEL_INSTANCE}={instance}"}
        ):
            label = container.labels.get("org.sandhub.sandbox", "")
            container.remove(force=True, v=True)
            with contextlib.suppress(docker.errors.NotFound):
                client.volumes.get(f"sandhub-{label}").remove(force=True)
        client.close()
