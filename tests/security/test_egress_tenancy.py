"""The egress services (issue 27) across teams and roles, on the in-memory backend: another
team's sandbox or secret answers exactly like a missing one, viewers and read-only keys
change nothing, and a refusal changes nothing. The REST routes and MCP tools over these
services are in the tenancy matrix (test_matrix.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sandboxes import services
from sandboxes.contract.errors import NotFound, PermissionDenied
from sandboxes.models import EgressSecret, Sandbox
from tenants.models import Channel, Team
from tenants.principal import Principal

pytestmark = pytest.mark.django_db

Call = Callable[[Principal, dict[str, Any]], object]

# Each service given team A's objects (ids in `ids`), as the acting principal.
READS: dict[str, Call] = {
    "network_log": lambda p, ids: services.network_log(p, ids["sandbox"]),
    "get_sandbox": lambda p, ids: services.get_sandbox(p, ids["sandbox"]),
}
WRITES: dict[str, Call] = {
    "delete_secret": lambda p, ids: services.delete_secret(p, ids["secret"]),
    "delete_own_secret": lambda p, ids: services.delete_secret(p, ids["own_secret"]),
    "add_secret": lambda p, ids: services.add_secret(
        p, name="NEW", hosts=["a.test"], value="v123456"
    ),
    "add_team_secret": lambda p, ids: services.add_secret(
        p, name="NEW", hosts=["a.test"], value="v123456", team_wide=True
    ),
    "set_team_egress": lambda p, ids: services.set_team_egress(p, allowlist=["a.test"]),
    "create_allowlist": lambda p, ids: services.create_sandbox(p, network="allowlist"),
}


@pytest.fixture
def ids(fake_backend, as_alice, team_a, team_b) -> dict[str, Any]:
    for team in (team_a, team_b):
        team.allow_network = True
        team.egress_allowlist = ["pypi.org"]
        team.save()
    secret = services.add_secret(
        as_alice, name="K", hosts=["a.test"], value="v1-secret", team_wide=True
    )
    own = services.add_secret(as_alice, name="OWN", hosts=["a.test"], value="v2-secret")
    sandbox = services.create_sandbox(as_alice, network="off")
    return {"sandbox": sandbox.id, "secret": secret.id, "own_secret": own.id}


def state() -> tuple:
    """What a refused call must leave as it was."""
    return (
        sorted(EgressSecret.objects.values_list("pk", "name", "user_id")),
        sorted(Sandbox.objects.values_list("public_id", "status")),
        sorted(Team.objects.values_list("slug", "egress_allowlist", "egress_max_mode")),
    )


@pytest.mark.parametrize("name", [*READS, "delete_secret", "delete_own_secret"])
def test_another_teams_objects_are_not_found(ids, as_bob, name):
    before = state()
    with pytest.raises(NotFound):
        {**READS, **WRITES}[name](as_bob, ids)
    assert state() == before


@pytest.mark.parametrize("name", list(WRITES))
def test_viewers_change_nothing(ids, as_victor, name):
    before = state()
    with pytest.raises((PermissionDenied, NotFound)):
        WRITES[name](as_victor, ids)
    assert state() == before


@pytest.mark.parametrize("name", list(WRITES))
def test_read_only_keys_change_nothing(ids, alice, team_a, name):
    key = Principal(user=alice, team=team_a, channel=Channel.API, scopes=frozenset({"read"}))
    before = state()
    with pytest.raises(PermissionDenied):
        WRITES[name](key, ids)
    assert state() == before


@pytest.mark.parametrize("name", list(READS))
def test_viewers_and_read_only_keys_may_read(ids, as_victor, alice, team_a, name):
    key = Principal(user=alice, team=team_a, channel=Channel.API, scopes=frozenset({"read"}))
    for principal in (as_victor, key):
        assert READS[name](principal, ids) is not None
    assert services.list_secrets(key) and services.get_team_egress(as_victor).team == "alpha"
