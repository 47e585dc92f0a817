"""The egress policy on the pages (sandboxes/web/egress.py): the create form's Network select
(only the modes the team allows) and allow-list, the sandbox page's Network section, and the
team's Network tab (the allow-list, edited by owners and admins; secrets, whose values are
shown nowhere)."""

from __future__ import annotations

import re

import pytest

from sandboxes import services
from sandboxes.models import EgressSecret, Sandbox
from tenants.models import AuditLog
from tests.web.egress_helpers import SECRET_VALUE, allow_network, refusal
from tests.web.helpers import field_errors

pytestmark = pytest.mark.django_db

GOOD = {
    "image": "python",
    "name": "net",
    "cpus": "1",
    "memory_mb": "512",
    "disk_mb": "256",
    "lifetime_minutes": "30",
}
SECRET = {
    "name": "OPENAI_API_KEY",
    "hosts": "api.openai.com\n*.openai.example",
    "header": "Authorization",
    "template": "Bearer {value}",
    "value": SECRET_VALUE,
}


def options_of(html: str, name: str) -> list[str]:
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert select, f"no select {name}"
    return re.findall(r'<option value="([^"]*)"', select.group(1))


# --- the create form --------------------------------------------------------------------------


def test_the_network_select_offers_only_the_modes_the_team_allows(
    login, alice, team_a, fake_backend
):
    assert 'name="network"' not in login(alice).get("/").content.decode()  # network not allowed
    allow_network(team_a, max_mode="allowlist")
    html = login(alice).get("/").content.decode()
    assert options_of(html, "network") == ["off", "allowlist"]
    assert 'name="allow"' in html and "egress.js" in html
    allow_network(team_a, max_mode="public")
    assert options_of(login(alice).get("/").content.decode(), "network") == [
        "off",
        "allowlist",
        "public",
    ]


def test_create_in_allowlist_mode_with_rules_of_its_own(login, alice, team_a, fake_backend):
    allow_network(team_a, allowlist=["pypi.org", "github.com:22,443", "*.pythonhosted.org"])
    data = {**GOOD, "network": "allowlist", "allow": "github.com:22,443\n\n *.pythonhosted.org \n"}
    response = login(alice).post("/sandboxes/create/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    sandbox = Sandbox.objects.get(team=team_a)
    assert sandbox.egress_mode == "allowlist" and sandbox.network is True
    assert sorted(sandbox.egress_allow) == ["*.pythonhosted.org", "github.com:22,443"]


def test_a_rule_outside_the_teams_list_is_refused_beside_the_field(
    login, alice, team_a, fake_backend
):
    allow_network(team_a, allowlist=["pypi.org"])
    data = {**GOOD, "network": "allowlist", "allow": "evil.example"}
    response = login(alice).post("/sandboxes/create/", data)
    assert response.status_code == 403
    assert any("evil.example" in e for e in field_errors(response.content.decode(), "allow"))
    assert not Sandbox.objects.filter(team=team_a).exists()


def test_a_mode_over_the_teams_is_refused_beside_the_field(login, alice, team_a, fake_backend):
    allow_network(team_a, max_mode="allowlist")
    response = login(alice).post("/sandboxes/create/", {**GOOD, "network": "public"})
    assert response.status_code in (400, 403)
    assert field_errors(response.content.decode(), "network")
    assert not Sandbox.objects.filter(team=team_a).exists()


def test_a_bad_rule_is_refused_and_nothing_is_made(login, alice, team_a, fake_backend):
    allow_network(team_a)
    data = {**GOOD, "network": "allowlist", "allow": "not a name!"}
    response = login(alice).post("/sandboxes/create/", data)
    assert response.status_code == 400
    assert "not a name!" in response.content.decode()  # the message names the bad rule
    assert not Sandbox.objects.filter(team=team_a).exists()


# --- the sandbox page -------------------------------------------------------------------------


def test_the_sandbox_page_shows_its_network_and_refusals(
    login, alice, as_alice, team_a, fake_backend
):
    allow_network(team_a, allowlist=["example.org", "pypi.org"])
    made = services.create_sandbox(as_alice, network="allowlist")
    refusal(made.id, "evil.example:443", "not in the allow-list", count=7)
    html = login(alice).get(f"/sandboxes/{made.id}/").content.decode()
    section = html[html.index('id="network"') :]
    assert "Allow-list" in section[:600] and "example.org" in section
    table = section[section.index('id="refused-table"') :]
    assert "<caption>" in table and '<th scope="col">Destination</th>' in table
    assert '<th scope="row"' in table and "evil.example:443" in table
    assert "not in the allow-list" in table and ">7<" in table


def test_a_sandbox_without_network_says_so(login, alice, as_alice, fake_backend):
    made = services.create_sandbox(as_alice)
    html = login(alice).get(f"/sandboxes/{made.id}/").content.decode()
    assert 'id="network-mode">Off<' in html and "has no network" in html
    assert 'id="refused-table"' not in html


# --- the team's Network tab -------------------------------------------------------------------


def test_owners_edit_the_allowlist_members_read_it(login, alice, mallory, team_a):
    allow_network(team_a, allowlist=["pypi.org"])
    owner_page = login(alice).get("/team/network/").content.decode()
    assert 'id="allowlist-form"' in owner_page and "pypi.org" in owner_page
    member_page = login(mallory).get("/team/network/").content.decode()
    assert 'id="allowlist-form"' not in member_page
    assert "<code>pypi.org</code>" in member_page and 'id="policy-ranges"' in member_page

    data = {"allowlist": "pypi.org\n*.pythonhosted.org:443\n"}
    response = login(alice).post("/team/network/allowlist/", data)
    assert response.status_code == 302
    team_a.refresh_from_db()
    assert team_a.egress_allowlist == ["pypi.org", "*.pythonhosted.org:443"]
    assert AuditLog.objects.filter(team=team_a, outcome="ok", channel="web").exists()


def test_a_member_may_not_change_the_allowlist(login, mallory, team_a):
    allow_network(team_a, allowlist=["pypi.org"])
    response = login(mallory).post("/team/network/allowlist/", {"allowlist": "*"})
    assert response.status_code == 403
    team_a.refresh_from_db()
    assert team_a.egress_allowlist == ["pypi.org"]


def test_a_bad_rule_in_the_allowlist_is_shown_and_nothing_saved(login, alice, team_a):
    allow_network(team_a, allowlist=["pypi.org"])
    data = {"allowlist": "pypi.org\nbad name here"}
    response = login(alice).post("/team/network/allowlist/", data)
    assert response.status_code == 400 and "bad name here" in response.content.decode()
    team_a.refresh_from_db()
    assert team_a.egress_allowlist == ["pypi.org"]


def test_secrets_are_listed_without_their_values(login, alice, team_a):
    response = login(alice).post("/team/network/secrets/", {**SECRET, "team_wide": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    secret = EgressSecret.objects.get(team=team_a)
    assert secret.user is None and SECRET_VALUE not in secret.value_encrypted
    html = login(alice).get("/team/network/").content.decode()
    row = html[html.index('data-name="OPENAI_API_KEY"') :]
    assert "api.openai.com" in row and "Authorization" in row and "whole team" in row
    assert secret.placeholder in row  # what a sandbox sees: usable where the value is not
    assert 'data-confirm="Delete the secret OPENAI_API_KEY?' in row
    assert 'type="password"' in html
    assert SECRET_VALUE not in html


def test_a_refused_secret_does_not_echo_its_value(login, alice, team_a):
    response = login(alice).post("/team/network/secrets/", {**SECRET, "hosts": ""})
    assert response.status_code == 400
    html = response.content.decode()
    assert field_errors(html, "hosts") and SECRET_VALUE not in html
    assert not EgressSecret.objects.exists()


def test_a_member_stores_an_own_secret_a_viewer_none(login, mallory, victor, team_a, as_alice):
    assert login(mallory).post("/team/network/secrets/", SECRET).status_code == 302
    assert EgressSecret.objects.get(team=team_a).user == mallory
    services.add_secret(
        as_alice, name="SHARED", hosts=["a.example"], value="shared-value", team_wide=True
    )
    page = login(mallory).get("/team/network/").content.decode()
    own, shared = page.index('data-name="OPENAI_API_KEY"'), page.index('data-name="SHARED"')
    rows = sorted([(own, "own"), (shared, "shared")])
    cut = {name: page[start : start + 1500].split("</tr>")[0] for start, name in rows}
    assert "delete-secret" in cut["own"] and "delete-secret" not in cut["shared"]
    assert 'name="team_wide"' not in page  # only owners and admins store team-wide ones
    response = login(victor).post("/team/network/secrets/", {**SECRET, "name": "OTHER"})
    assert response.status_code == 403
    assert EgressSecret.objects.count() == 2


def test_delete_a_secret_and_another_teams_is_not_found(login, alice, bob, as_alice, as_bob):
    mine = services.add_secret(
        as_alice, name="MINE", hosts=["a.example"], value=SECRET_VALUE, team_wide=True
    )
    theirs = services.add_secret(as_bob, name="THEIRS", hosts=["b.example"], value=SECRET_VALUE)
    client = login(alice)
    assert client.post(f"/team/network/secrets/{theirs.id}/delete/").status_code == 404
    assert client.post(f"/team/network/secrets/{mine.id}/delete/").status_code == 302
    assert list(EgressSecret.objects.values_list("name", flat=True)) == ["THEIRS"]
