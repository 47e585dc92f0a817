"""The tenancy matrix's cases for the egress policy (test_matrix.py takes them): a sandbox's
network log and a secret of team B answer as made-up ids do; the team's allow-list and
secrets act in the key's own team whatever ?team= says, and show no secret's value; viewers
and read-only keys change nothing. Not a test module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandboxes.models import EgressSecret
from tenants.models import Team
from tests.security.matrix import B_SB, B_SECRET
from tests.security.matrix_tools import REFUSED_WRITERS

# Routes whose service checks the role before looking the id up: a viewer or a read-only key
# is refused (403) whatever the id, team B's or made up (the answers are still compared).
ROLE_FIRST = {("team-secret", "DELETE")}
NEW_SECRET = {"name": "MATRIX_NEW", "hosts": ["api.example"], "value": "team B's secret!"}


def rest_cases(case: Callable[..., Any]) -> dict[tuple[str, str], Any]:
    return {
        ("network", "GET"): case([{"sandbox_id": B_SB}]),
        ("team-egress", "GET"): case(scoped=policy_of_team_a),
        ("team-egress", "PATCH"): case(json={"allowlist": ["pypi.org"]}, scoped=policy_changed),
        ("team-secrets", "GET"): case(scoped=secrets_of_team_a),
        ("team-secrets", "POST"): case(json=NEW_SECRET, scoped=secret_stored),
        ("team-secret", "DELETE"): case([{"secret_id": B_SECRET}]),
    }


def tool_cases(case: Callable[..., Any]) -> dict[str, Any]:
    return {"get_network_log": case([{"sandbox_id": B_SB}])}


def policy_of_team_a(scene, actor, response, created) -> None:
    assert response.status_code == 200, response.text
    assert response.json()["team"] == scene.team_a.slug


def policy_changed(scene, actor, response, created) -> None:
    """The team's policy needs an owner or admin with a key of admin scope: no key here has
    that scope, so every actor is refused (tests/api/test_egress.py has the one allowed)."""
    team_b = Team.objects.get(pk=scene.team_b.pk)
    assert team_b.egress_allowlist == [], "team B's allow-list changed"
    assert response.status_code == 403, response.text
    assert Team.objects.get(pk=scene.team_a.pk).egress_allowlist == []


def secrets_of_team_a(scene, actor, response, created) -> None:
    assert response.status_code == 200, response.text
    names = {row["name"] for row in response.json()["results"]}
    theirs = EgressSecret.objects.filter(team=scene.team_b).values_list("name", flat=True)
    assert not names & set(theirs), names
    if actor in ("owner", "read-only"):  # the owner's own secret (populate), listed to him
        assert names, response.text


def secret_stored(scene, actor, response, created) -> None:
    """A writer's secret lands in team A (and is deleted again: the case changes nothing)."""
    made = EgressSecret.objects.filter(name=NEW_SECRET["name"])
    try:
        assert NEW_SECRET["value"] not in response.text
        if actor in REFUSED_WRITERS:
            assert response.status_code == 403, response.text
            assert not made.exists()
            return
        assert response.status_code == 201, response.text
        assert [s.team_id for s in made] == [scene.team_a.pk]
    finally:
        made.delete()
