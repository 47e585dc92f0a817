"""Fixtures of the tenancy matrix (test_matrix.py; its stage: tests/security/matrix.py): two
teams, every role of team A with a key, and team B's sandbox, command and background command,
on the in-memory backend or on the real Docker engine; and a record of everything a refused
request must leave alone.

The fixtures here are named matrix_* so they cannot shadow another module's; they need the
module's `live_db` (tests/conftest.py), since the live server thread must see the rows.
matrix_orm runs the ORM from inside an MCP conversation (async).

`stage` and `pair` (test_ssh_isolation*.py; ssh_tenants.py): one SSH host shared by two
teams, and a sandbox of each team on it, for a module.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from hosts.backends import reset_backends
from hosts.models import Host, Image
from tenants import apikeys
from tenants.models import Channel, Role, Team
from tenants.principal import Principal
from tests.engine import engine_cleaning_up
from tests.fakes import FakeBackend
from tests.live import World
from tests.security.matrix import (
    ACTORS,
    BACKENDS,
    MATRIX_INSTANCE,
    Orm,
    Scene,
    delete_all,
    make_user,
    populate,
)
from tests.security.ssh_tenants import IsolationHost, Pair, isolation_host
from tests.ssh.sshd import Sshd


@pytest.fixture(scope="module")
def matrix_tenants(live_db) -> dict[str, Any]:
    """Team A (alpha) with a user of each role, team B (beta) with a member; a key each.
    The rate-limit counters start afresh: ids restart after an earlier module's flush, and
    its counts would be taken for this module's users."""
    caches["ratelimit"].clear()
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    team_a = Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=10)
    team_b = Team.objects.create(slug="beta", name="Team Beta")
    users = {role: make_user(f"a-{role}", team_a, role) for role in Role.values}
    bob = make_user("b-member", team_b, Role.MEMBER)
    keys, rows = {}, {}
    for actor, (role, scopes) in ACTORS.items():
        made = apikeys.create_key(users[role], team_a, name=actor, scopes=scopes)
        keys[actor], rows[actor] = made.plaintext, made.key
    principals = {
        actor: apikeys.principal_for(rows[actor], Channel.API, "127.0.0.1") for actor in ACTORS
    }
    principals["bob"] = Principal(user=bob, team=team_b, channel=Channel.WEB)
    return {"teams": (team_a, team_b), "keys": keys, "rows": rows, "principals": principals}


@pytest.fixture(scope="module")
def matrix_scene(request, matrix_tenants) -> Iterator[Scene]:
    """Parametrized (indirectly) with the backend: "fake" or "docker"."""
    backend: str = request.param
    team_a, team_b = matrix_tenants["teams"]
    principals = matrix_tenants["principals"]
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            override_settings(
                SANDHUB_BACKENDS={"docker": BACKENDS[backend]}, SANDHUB_INSTANCE=MATRIX_INSTANCE
            )
        )
        if backend == "docker":
            stack.enter_context(engine_cleaning_up(MATRIX_INSTANCE))
        reset_backends()
        FakeBackend.sandboxes = {}
        stack.callback(reset_backends)
        scene = Scene(
            backend=backend,
            keys=matrix_tenants["keys"],
            key_rows=matrix_tenants["rows"],
            team_a=team_a,
            team_b=team_b,
            foreign=populate(principals["bob"], "team B's secret\n"),
            own=populate(principals["owner"], "team A's own\n"),
            principals=principals,
        )
        stack.callback(delete_all, principals["bob"], principals["owner"])
        scene.baseline = scene.state()
        yield scene


@pytest.fixture
def matrix_created(request, matrix_scene) -> Iterator[Callable[[], list[str]]]:
    """For cases that may create sandboxes in team A (the test's `actor`): lists those made
    since the fixture began and undoes them after the case."""
    created = matrix_scene.created_since()
    yield created
    matrix_scene.undo_creations(request.getfixturevalue("actor"), created)


@pytest.fixture
def matrix_orm() -> Iterator[Orm]:
    worker = Orm()
    yield worker
    worker.close()


# -- two teams' sandboxes on one SSH host (test_ssh_isolation*.py, ssh_tenants.py) ----------


@pytest.fixture(scope="module")
def stage(world: World, server: Sshd) -> Iterator[IsolationHost]:
    with isolation_host(world, server) as made:
        yield made


@pytest.fixture(scope="module")
def pair(stage: IsolationHost) -> Pair:
    secret = secrets.token_hex(16)
    a = stage.create(stage.alice, network=True)
    b = stage.create(stage.bob, network=True, env={"BLUE_CREATE_SECRET": secret})
    return Pair(stage=stage, a=a, b=b, b_create_secret=secret)
