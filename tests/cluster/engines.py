"""The two Docker engines of the layout as the harness uses them: the local engine, and the
second dockerd on TCP with TLS (tests/cluster/dockerd2.py, the `second_engine` fixture of
tests/cluster/conftest.py). The one place that knows how each is registered, listed and
restarted. Not a test module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import docker
from django.conf import settings

from hosts.models import Host
from tenants.models import Team
from tests.cluster.dockerd2 import SecondEngine


@dataclass
class Engine:
    name: str
    client: Callable[[], Any]  # a docker.DockerClient on it
    register: Callable[[str, Team], Host]  # (host name, team it is private to) -> the Host row
    restart: Callable[[], None] | None = None  # None: not restarted by the faults


def local_engine() -> Engine:
    def register(name: str, team: Team) -> Host:
        return Host.objects.create(
            name=name, kind="docker", endpoint=settings.SANDHUB_DOCKER_URL, team=team
        )

    def client() -> Any:
        return docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL)

    return Engine("local", client, register)


def remote_engine(engine: SecondEngine) -> Engine:
    """The second dockerd, added as an operator adds it (manage.py add_host tcp://… --tls-*)."""

    def register(name: str, team: Team) -> Host:
        return engine.register(name, team=team.slug)

    return Engine(engine.name, engine.client, register, engine.restart)
