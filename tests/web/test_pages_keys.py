"""API keys page: my keys, create (shown once, with the claude and .mcp.json lines), revoke."""

from __future__ import annotations

import html
import json
import re

import pytest
from django.utils import timezone

from tenants import apikeys
from tenants.models import ApiKey, AuditLog
from tests.web.helpers import field_errors

pytestmark = pytest.mark.django_db


def new_key(user, team, name="k"):
    return apikeys.create_key(user, team, name=name, scopes="read,write").key


def test_lists_my_keys_only(login, alice, mallory, bob, team_a, team_b):
    mine = new_key(alice, team_a, "alice-laptop")
    ApiKey.objects.filter(pk=mine.pk).update(
        last_used_at=timezone.now(), last_used_address="10.1.2.3"
    )
    colleague = new_key(mallory, team_a, "mallory-key")
    other_team = new_key(bob, team_b, "bob-key")
    page = login(alice).get("/keys/").content.decode()
    assert "alice-laptop" in page and f"shk_{mine.prefix}_" in page
    assert "10.1.2.3" in page and "read, write" in page
    assert "mallory-key" not in page and colleague.prefix not in page
    assert "bob-key" not in page and other_team.prefix not in page


def test_empty_state(login, alice):
    assert "You have no API key for this team yet" in login(alice).get("/keys/").content.decode()


def test_create_shows_the_key_once_with_claude_lines(login, alice, team_a):
    client = login(alice)
    response = client.post("/keys/", {"name": "my agent", "scopes": ["read"], "expires": "7d"})
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    page = html.unescape(response.content.decode())
    plaintext = re.search(r"shk_[a-z0-9]+_[A-Za-z0-9_-]+", page).group(0)
    key = apikeys.authenticate(plaintext)
    assert key is not None and key.user == alice and key.team == team_a
    assert key.name == "my agent" and key.scopes == ["read"]
    assert 6 <= (key.expires_at - timezone.now()).days <= 7
    # The same line `manage.py create_api_key --claude` prints.
    assert (
        "claude mcp add --transport http sandhub http://testserver/mcp/ "
        f'--header "Authorization: Bearer {plaintext}"'
    ) in page
    snippet = re.search(r'<textarea id="mcp-json"[^>]*>(.*?)</textarea>', page, re.S).group(1)
    assert json.loads(snippet) == {
        "mcpServers": {
            "sandhub": {
                "type": "http",
                "url": "http://testserver/mcp/",
                # README.md's form: the key from the environment, never in the file.
                "headers": {"Authorization": "Bearer ${SANDHUB_API_KEY}"},
            }
        }
    }
    assert plaintext not in snippet
    exported = re.search(r'<input id="key-export"[^>]*value="([^"]*)"', page).group(1)
    assert exported == f"export SANDHUB_API_KEY={plaintext}"
    # Shown once: the list shows the prefix only, and the page never again the secret.
    again = client.get("/keys/").content.decode()
    assert plaintext not in again and f"shk_{key.prefix}_" in again
    assert AuditLog.objects.filter(action="apikey.create", channel="web", outcome="ok").exists()


def test_create_without_expiry(login, alice):
    login(alice).post("/keys/", {"name": "forever", "scopes": ["read", "write"], "expires": ""})
    assert ApiKey.objects.get(name="forever").expires_at is None


@pytest.mark.parametrize(
    "data,field,message",
    [
        ({"name": "x", "expires": "30d"}, "scopes", "This field is required"),
        ({"scopes": ["root"], "expires": "30d"}, "scopes", "Select a valid choice"),
        ({"scopes": ["read"], "expires": "2d"}, "expires", "Select a valid choice"),
        ({"scopes": ["read"], "name": "n" * 101}, "name", "at most 100 characters"),
    ],
)
def test_bad_input_beside_the_field_and_no_key(login, alice, data, field, message):
    response = login(alice).post("/keys/", data)
    assert response.status_code == 400
    assert any(message in e for e in field_errors(response.content.decode(), field))
    assert not ApiKey.objects.exists()


def test_viewer_may_make_a_key_within_his_role(login, victor):
    # A key never grants more than its user's role; the services refuse a viewer's writes.
    response = login(victor).post("/keys/", {"scopes": ["read"], "expires": "1d"})
    assert response.status_code == 200
    assert ApiKey.objects.get(user=victor).scopes == ["read"]


def test_revoke_my_key(login, alice, team_a):
    key = new_key(alice, team_a)
    client = login(alice)
    assert "revoke-key" in client.get("/keys/").content.decode()
    response = client.post(f"/keys/{key.pk}/revoke/")
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked
    page = client.get("/keys/").content.decode()
    assert "is revoked" in page and "revoke-key" not in page
    assert AuditLog.objects.filter(action="apikey.revoke", outcome="ok").count() == 1


def test_revoke_another_teams_key_is_not_found(login, alice, bob, team_b):
    key = new_key(bob, team_b)
    response = login(alice).post(f"/keys/{key.pk}/revoke/")
    assert response.status_code == 404
    key.refresh_from_db()
    assert not key.revoked
    assert AuditLog.objects.get(action="apikey.revoke").outcome == "not_found"


def test_member_may_not_revoke_a_colleagues_key(login, mallory, victor, team_a):
    key = new_key(victor, team_a)
    response = login(mallory).post(f"/keys/{key.pk}/revoke/")
    assert response.status_code == 403
    key.refresh_from_db()
    assert not key.revoked


def test_revoke_is_post_only(login, alice, team_a):
    key = new_key(alice, team_a)
    assert login(alice).get(f"/keys/{key.pk}/revoke/").status_code == 405
