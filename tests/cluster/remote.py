"""Helpers of the tests on the second engine: the platform using it as its Docker host, and a
look at its containers from the outside. Not a test module."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import docker
import pytest
from django.conf import settings

from hosts.backends import reset_backends
from hosts.models import Host
from sandboxes.models import Sandbox
from tests.cluster.dockerd2 import SecondEngine

SANDBOX_LABEL = "org.sandhub.sandbox"


@contextlib.contextmanager
def platform_on(engine: SecondEngine, name: str = "engine-2") -> Iterator[Host]:
    """The real Docker backend, with `engine` registered as host `name`; what sandboxes the
    test left are removed from it after."""
    previous = settings.SANDHUB_BACKENDS
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    reset_backends()
    try:
        yield engine.register(name)
    finally:
        reset_backends()
        settings.SANDHUB_BACKENDS = previous
        remove_sandboxes(engine)


def remove_sandboxes(engine: SecondEngine) -> None:
    with contextlib.closing(engine.client()) as client:
        for container in client.containers.list(all=True, filters={"label": SANDBOX_LABEL}):
            container.remove(force=True, v=True)
        for volume in client.volumes.list(filters={"label": SANDBOX_LABEL}):
            volume.remove(force=True)


def containers(client: docker.DockerClient, sandbox_id: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"{SANDBOX_LABEL}={sandbox_id}"})


def status_on(client: docker.DockerClient, sandbox_id: str) -> str:
    found = containers(client, sandbox_id)
    return found[0].status if found else "missing"


def host_of(sandbox_id: str) -> str:
    return Sandbox.objects.select_related("host").get(public_id=sandbox_id).host.name


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `condition` (something on the other side of the engine, with no event to await)
    until it holds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)
    return value
