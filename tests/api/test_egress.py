"""REST for the egress policy (sandboxes/api/egress.py): create with a network mode and an
allow-list, a sandbox's network in its detail and its log, the team's allow-list (PATCH:
owners and admins), secrets (a value goes in, never comes out). In-process clients with real
keys, on the in-memory backend; errors in the API's shape {"detail", "code"}."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.models import EgressSecret, Sandbox
from tenants import apikeys
from tests.api.helpers import API
from tests.web.egress_helpers import SECRET_VALUE, allow_network, refusal

pytestmark = pytest.mark.django_db

SECRET = {"name": "OPENAI_API_KEY", "hosts": ["api.openai.com"], "value": SECRET_VALUE}


@pytest.fixture
def clients(alice, mallory, victor, bob, team_a, team_b):
    def client(user, team, scopes="read,write") -> APIClient:
        made = apikeys.create_key(user, team, name="test", scopes=scopes)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {made.plaintext}")
        return api

    return {
        "alice": client(alice, team_a),
        "alice_admin": client(alice, team_a, "read,write,admin"),
        "alice_read": client(alice, team_a, "read"),
        "mallory": client(mallory, team_a),
        "victor": client(victor, team_a),
        "bob": client(bob, team_b),
    }


def test_create_with_a_mode_and_rules_then_read_its_network(clients, team_a, fake_backend):
    allow_network(team_a, allowlist=["pypi.org", "github.com:22,443"])
    body = {"network": "allowlist", "allow": ["github.com:22,443"]}
    made = clients["alice"].post(f"{API}/sandboxes/", body, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["network_mode"] == "allowlist" and made.json()["network"] is True
    sandbox_id = made.json()["id"]
    refusal(sandbox_id, "evil.example:443", "not in the allow-list", count=4)

    detail = clients["alice"].get(f"{API}/sandboxes/{sandbox_id}/").json()
    assert detail["network_mode"] == "allowlist"
    assert detail["egress"]["allow"] == ["github.com:22,443"]
    assert detail["egress"]["refused"][0]["destination"] == "evil.example:443"

    log = clients["victor"].get(f"{API}/sandboxes/{sandbox_id}/network/")
    assert log.status_code == 200, log.content
    row = log.json()["refused"][0]
    assert (row["destination"], row["reason"], row["count"]) == (
        "evil.example:443",
        "not in the allow-list",
        4,
    )
    assert clients["bob"].get(f"{API}/sandboxes/{sandbox_id}/network/").status_code == 404


def test_network_true_and_false_still_work(clients, team_a, fake_backend):
    allow_network(team_a)
    on = clients["alice"].post(f"{API}/sandboxes/", {"network": True}, format="json")
    off = clients["alice"].post(f"{API}/sandboxes/", {"network": False}, format="json")
    assert on.status_code == 201 and on.json()["network"] is True
    assert off.status_code == 201 and off.json()["network_mode"] == "off"


@pytest.mark.parametrize("network", ["sideways", 1, "", "Public"])
def test_a_bad_mode_is_400_and_nothing_is_made(clients, team_a, fake_backend, network):
    allow_network(team_a)
    answer = clients["alice"].post(f"{API}/sandboxes/", {"network": network}, format="json")
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["code"] == "invalid" and "network" in body["fields"]
    assert "allowlist" in body["fields"]["network"]
    assert not Sandbox.objects.filter(team=team_a).exists()


def test_a_mode_or_rule_over_the_teams_is_refused(clients, team_a, fake_backend):
    allow_network(team_a, max_mode="allowlist", allowlist=["pypi.org"])
    for body, words in [
        ({"network": "public"}, "allowlist at most"),
        ({"network": "allowlist", "allow": ["evil.example"]}, "evil.example"),
        ({"network": "off", "allow": ["pypi.org"]}, "allowlist only"),
    ]:
        answer = clients["alice"].post(f"{API}/sandboxes/", body, format="json")
        assert answer.status_code in (400, 403), answer.content
        assert words in answer.json()["detail"] and answer.json()["code"] in (
            "invalid",
            "forbidden",
        )
    assert not Sandbox.objects.filter(team=team_a).exists()


def test_team_egress_read_by_all_changed_by_owners(clients, team_a):
    allow_network(team_a, allowlist=["pypi.org"])
    seen = clients["victor"].get(f"{API}/team/egress/")
    assert seen.status_code == 200 and seen.json()["allowlist"] == ["pypi.org"]
    assert seen.json()["max_mode"] == "public"

    change = {"allowlist": ["pypi.org", "*.pythonhosted.org:443"]}
    # Owners and admins, with a key of admin scope (the team's policy is an admin's matter).
    for refused in ("mallory", "victor", "alice_read", "alice"):
        answer = clients[refused].patch(f"{API}/team/egress/", change, format="json")
        assert answer.status_code == 403, (refused, answer.content)
        assert answer.json()["code"] == "forbidden"
    team_a.refresh_from_db()
    assert team_a.egress_allowlist == ["pypi.org"]

    answer = clients["alice_admin"].patch(f"{API}/team/egress/", change, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["allowlist"] == change["allowlist"]
    ceiling = {"max_mode": "public"}  # a platform admin's to set (in the admin), not the team's
    raised = clients["alice_admin"].patch(f"{API}/team/egress/", ceiling, format="json")
    assert raised.status_code == 400 and "max_mode" in raised.json()["fields"]
    team_a.refresh_from_db()
    assert team_a.egress_allowlist == change["allowlist"]


def test_a_bad_rule_or_field_changes_nothing(clients, team_a):
    allow_network(team_a, allowlist=["pypi.org"])
    bad_rule = clients["alice_admin"].patch(
        f"{API}/team/egress/", {"allowlist": ["bad name"]}, format="json"
    )
    assert bad_rule.status_code == 400 and "bad name" in bad_rule.json()["detail"]
    ranges = clients["alice_admin"].patch(
        f"{API}/team/egress/", {"allowed_ranges": ["10.0.0.0/8"]}, format="json"
    )
    assert ranges.status_code == 400 and "allowed_ranges" in ranges.json()["fields"]
    team_a.refresh_from_db()
    assert team_a.egress_allowlist == ["pypi.org"] and team_a.egress_allowed_ranges == []


def test_secrets_go_in_and_their_values_never_come_out(clients, team_a):
    body = {**SECRET, "team_wide": True}
    made = clients["alice_admin"].post(f"{API}/team/secrets/", body, format="json")
    assert made.status_code == 201, made.content
    assert SECRET_VALUE not in made.content.decode() and "value" not in made.json()
    assert made.json()["team_wide"] is True and made.json()["hosts"] == ["api.openai.com"]
    listed = clients["victor"].get(f"{API}/team/secrets/")
    assert listed.status_code == 200 and SECRET_VALUE not in listed.content.decode()
    assert [s["name"] for s in listed.json()["results"]] == ["OPENAI_API_KEY"]

    secret_id = made.json()["id"]
    assert clients["bob"].delete(f"{API}/team/secrets/{secret_id}/").status_code == 404
    assert clients["victor"].delete(f"{API}/team/secrets/{secret_id}/").status_code == 403
    assert clients["alice_read"].delete(f"{API}/team/secrets/{secret_id}/").status_code == 403
    assert clients["alice"].delete(f"{API}/team/secrets/{secret_id}/").status_code == 403
    assert clients["alice_admin"].delete(f"{API}/team/secrets/{secret_id}/").status_code == 204
    assert not EgressSecret.objects.exists()


def test_viewers_and_read_only_keys_store_no_secret(clients):
    for who in ("victor", "alice_read"):
        answer = clients[who].post(f"{API}/team/secrets/", SECRET, format="json")
        assert answer.status_code == 403, (who, answer.content)
        assert SECRET_VALUE not in answer.content.decode()
    assert not EgressSecret.objects.exists()


def test_a_bad_secret_is_400_without_its_value(clients):
    answer = clients["alice"].post(f"{API}/team/secrets/", {**SECRET, "hosts": []}, format="json")
    assert answer.status_code == 400 and "hosts" in answer.json()["fields"]
    assert SECRET_VALUE not in answer.content.decode()
    assert not EgressSecret.objects.exists()


def test_another_teams_secret_is_not_listed(clients, as_bob):
    services.add_secret(as_bob, name="THEIRS", hosts=["b.example"], value=SECRET_VALUE)
    listed = clients["alice"].get(f"{API}/team/secrets/").json()
    assert listed["results"] == []
