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

# Only owners and admins change the team's policy; a member is refused like a viewer.
POLICY_REFUSED = {*REFUSED_WRITERS, "member"}
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
    team_b = Team.objects.get(pk=scene.team_b.pk)
    assert team_b.egress_allowlist == [], "team B's allow-list changed"
    if actor in POLICY_REFUSED:
        assert response.status_code == 403, response.text
        return
    assert response.status_code == 200, response.text
    assert response.json()["team"] == scene.team_a.slug


def secrets_of_team_a(scene, actor, response, created) -> None:
    assert response.status_code == 200, response.text
    names = {row["name"] for row in response.json()["results"]}
    theirs = EgressSecret.objects.filter(team=scene.team_b).values_list("name", flat=True)
    assert names and not names & set(theirs), names


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
