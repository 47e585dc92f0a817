"""Fixtures of the Docker backend's tests: DockerBackend on this machine's engine, its
sandboxes, the sandbox agent's link to them, and an image without python3 (helpers:
tests/docker/helpers.py). No database is needed: the Host is never saved.

Every test in this folder uses the real engine and the sandbox image, so each is marked
`docker` (`make test-fast` leaves them out).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest

from hosts.backends.agent.link import AgentLink
from hosts.backends.base import SandboxSpec
from hosts.backends.docker import DockerBackend
from hosts.backends.docker.agent import agent_link
from hosts.models import Host
from tests.docker.helpers import ENDPOINT, IMAGE, NO_PYTHON_IMAGE, make_spec, remove_leftovers
from tests.markers import mark_folder


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "docker")


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    """A plain SDK client, to look at what the backend did from the outside."""
    try:
        client = docker.DockerClient(base_url=ENDPOINT, timeout=60)
        client.ping()
    except Exception as exc:
        pytest.fail(f"these tests need a Docker engine at {ENDPOINT}: {exc}")
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"these tests need the image {IMAGE}: build it from images/sandbox")
    yield client
    remove_leftovers(client)
    client.close()


@pytest.fixture(scope="module")
def backend(engine: docker.DockerClient) -> Iterator[DockerBackend]:
    instance = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))
    yield instance
    instance.close()


@pytest.fixture
def spec() -> SandboxSpec:
    return make_spec()


@pytest.fixture
def sandbox(backend: DockerBackend, spec: SandboxSpec) -> Iterator[dict[str, Any]]:
    state = backend.provision(spec)
    try:
        yield state
    finally:
        backend.destroy(state)


@pytest.fixture
def link(backend: DockerBackend) -> Iterator[AgentLink]:
    """The sandbox agent's link to the backend's sandboxes (one agent per sandbox)."""
    instance = agent_link(backend.engine)
    yield instance
    instance.close()


@pytest.fixture(scope="module")
def no_python_image(engine: docker.DockerClient) -> Iterator[str]:
    """The sandbox image without python3: the agent cannot run in it."""
    pythons = "/usr/bin/python3 /usr/bin/python3.* /usr/libexec/sandhub"  # the agent's copy too
    dockerfile = f"FROM {IMAGE}\nUSER root\nRUN rm -rf {pythons}\nUSER sandbox\n"
    engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=NO_PYTHON_IMAGE, rm=True)
    yield NO_PYTHON_IMAGE
    with contextlib.suppress(docker.errors.APIError):
        engine.images.remove(NO_PYTHON_IMAGE, force=True)
