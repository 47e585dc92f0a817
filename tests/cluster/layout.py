"""The multi-node layout on one machine: PostgreSQL (the test database), two web processes,
two qcluster workers, two Docker engines and an SSH host, with three teams, each with an
API key and a host of its own, so sandboxes land on every host. Not a test module.

    with running_layout(scratch, remote_engine(second_engine), sshd, ssh_base) as layout:
        layout.webs[0].url, layout.tenants[0].key, layout.kill_web(0), ...

Each team's host is private to it (Host.team): placement then puts the team's sandboxes
there, whatever the idle scores say, which makes "sandboxes on both engines and the SSH
host" a fact of the set-up that the checks confirm from the database.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model

from hosts.models import Host, Image
from tenants import apikeys
from tenants.models import Membership, Role, Team
from tests.cluster.engines import Engine, local_engine
from tests.live import subprocess_env
from tests.qcluster import QCluster
from tests.ssh.helpers import register
from tests.ssh.logins import SUDO_USER
from tests.ssh.sshd import Sshd
from tests.webprocess import WebProcess

WEBS = 2
WORKERS = 2
HOST_NAMES = {"engine1": "cluster-engine-1", "engine2": "cluster-engine-2", "ssh": "cluster-ssh"}


@dataclass
class Tenant:
    team: Team
    key: str  # the API key's plaintext
    host: Host  # the team's own host
    where: str  # engine1, engine2 or ssh


@dataclass
class Layout:
    webs: list[WebProcess]
    workers: list[QCluster]
    engines: dict[str, Engine]  # engine1 (local), engine2 (the second dockerd)
    sshd: Sshd
    tenants: list[Tenant] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        return [web.url for web in self.webs]

    def hosts(self) -> dict[str, Host]:
        return {tenant.where: tenant.host for tenant in self.tenants}


def build_tenants(engines: dict[str, Engine], sshd: Sshd, ssh_base: Path) -> list[Tenant]:
    """Three teams, an owner and a read-write API key each, and each its own host."""
    Image.objects.get_or_create(
        name="python", defaults={"reference": settings.SANDHUB_SANDBOX_IMAGE, "is_default": True}
    )
    tenants = []
    for slug, where in (("alpha", "engine1"), ("beta", "engine2"), ("gamma", "ssh")):
        team = Team.objects.create(slug=f"cl-{slug}", name=f"Cluster {slug}",
                                   max_running_sandboxes=50)  # fmt: skip
        user = get_user_model().objects.create(username=f"cluster-{slug}")
        Membership.objects.create(user=user, team=team, role=Role.OWNER)
        name = HOST_NAMES[where]
        if where == "ssh":
            host = register(sshd, name, SUDO_USER, ssh_base, team=team)
        else:
            host = engines[where].register(name, team)
        key = apikeys.create_key(user, team, name=f"cluster-{slug}", scopes="read,write")
        tenants.append(Tenant(team=team, key=key.plaintext, host=host, where=where))
    return tenants


@contextlib.contextmanager
def running_layout(
    scratch: Path, engine2: Engine, sshd: Sshd, ssh_base: Path, webs: int = WEBS
) -> Iterator[Layout]:
    """Every process up (on the test database, which must be committed: `live_db`), and
    down again after, whatever happened. engine2: tests/cluster/engines.py `remote_engine`."""
    engines = {"engine1": local_engine(), "engine2": engine2}
    layout = Layout(
        webs=[_web(scratch, f"web{i}") for i in range(webs)],
        workers=[
            QCluster(scratch / f"worker{i}.log", env={"DATABASE_URL": _database_url()})
            for i in range(WORKERS)
        ],
        engines=engines,
        sshd=sshd,
    )
    layout.tenants = build_tenants(engines, sshd, ssh_base)
    try:
        for process in [*layout.webs, *layout.workers]:
            process.start()
        yield layout
    finally:
        for web in layout.webs:
            web.stop()
        for worker in layout.workers:
            worker.stop()


def _web(scratch: Path, name: str) -> WebProcess:
    """A web process of the layout: ready once its port accepts (one worker: uvicorn binds
    after its startup), restartable in place by the web fault."""
    return WebProcess(scratch / f"{name}.log", name=name, ready_path=None)


def _database_url() -> str:
    return subprocess_env()["DATABASE_URL"]
