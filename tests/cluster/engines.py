"""The second Docker engine of the layout, in one place (the hook the engines helper's
tests/cluster/dockerd2.py plugs into). Not a test module.

Until a second dockerd is available, the "second engine" is a second host row on the local
engine: placement, the clients and the checks run the same, only the dockerd restart fault is
skipped (`restart` is None) and the report says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import docker
from django.conf import settings

from hosts.models import Host
from tenants.models import Team


@dataclass
class Engine:
    """A Docker engine as the layout uses it: how to register it, list what is on it, and
    (for the second one) restart its daemon."""

    name: str
    client: Callable[[], Any]  # a docker.DockerClient on it
    register: Callable[[str, Team], Host]  # (host name, team) -> the Host row
    restart: Callable[[], None] | None = None  # None: this engine cannot be restarted here
    remote: bool = False  # a dockerd over TCP with TLS


def local_engine() -> Engine:
    def register(name: str, team: Team) -> Host:
        return Host.objects.create(
            name=name, kind="docker", endpoint=settings.SANDHUB_DOCKER_URL, team=team
        )

    return Engine("local", lambda: docker.DockerClient(base_url=settings.SANDHUB_DOCKER_URL),
                  register)  # fmt: skip


@contextmanager
def second_engine() -> Iterator[Engine]:
    """The second dockerd over TCP with TLS when tests/cluster/dockerd2.py exists; else the
    local engine again (no restart fault)."""
    try:
        from tests.cluster import dockerd2  # type: ignore[attr-defined]
    except ImportError:
        yield local_engine()
        return
    with _from_dockerd2(dockerd2) as engine:
        yield engine


@contextmanager
def _from_dockerd2(module: Any) -> Iterator[Engine]:  # pragma: no cover - filled at merge
    raise NotImplementedError("wire tests/cluster/dockerd2.py in here once it exists")
    yield  # type: ignore[unreachable]
