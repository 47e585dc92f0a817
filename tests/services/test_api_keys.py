"""API keys: shown once, stored as a hash, checked in constant time, never more than the
user's current role; the management command and the admin."""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from tenants import apikeys
from tenants.models import ApiKey, AuditLog, Channel, Membership, Role

pytestmark = pytest.mark.django_db


def test_key_is_shown_once_and_only_its_hash_is_stored(alice, team_a):
    new = apikeys.create_key(alice, team_a, name="laptop")
    mark, prefix, secret = new.plaintext.split("_", 2)
    assert mark == "shk" and prefix == new.key.prefix and len(prefix) == 8
    assert len(secret) >= 40
    row = ApiKey.objects.get(pk=new.key.pk)
    assert row.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in repr(row) and secret not in str(row)
    assert new.plaintext not in str(row.__dict__)
    assert row.scopes == ["read", "write"]


def test_authenticate_accepts_the_key_and_refuses_everything_else(alice, team_a, caplog):
    new = apikeys.create_key(alice, team_a)
    assert apikeys.authenticate(new.plaintext) == new.key
    secret = new.plaintext.split("_", 2)[2]
    wrong = new.plaintext[:-4] + ("AAAA" if not new.plaintext.endswith("AAAA") else "BBBB")
    with caplog.at_level(logging.WARNING, logger="sandhub.apikeys"):
        for bad in ["", "nonsense", wrong, "shk_zzzzzzzz_" + secret, new.plaintext + "x"]:
            assert apikeys.authenticate(bad, address="10.0.0.9") is None
    assert "wrong secret" in caplog.text and "10.0.0.9" in caplog.text
    assert secret not in caplog.text  # failures are logged without the key


def test_revoked_expired_inactive_and_removed_members_are_refused(alice, team_a, caplog):
    keys = [apikeys.create_key(alice, team_a) for _ in range(2)]
    apikeys.revoke(keys[0].key)
    ApiKey.objects.filter(pk=keys[1].key.pk).update(expires_at=timezone.now())
    with caplog.at_level(logging.WARNING, logger="sandhub.apikeys"):
        assert apikeys.authenticate(keys[0].plaintext) is None
        assert apikeys.authenticate(keys[1].plaintext) is None
    assert "revoked" in caplog.text and "expired" in caplog.text

    live = apikeys.create_key(alice, team_a)
    alice.is_active = False
    alice.save()
    assert apikeys.authenticate(live.plaintext) is None
    alice.is_active = True
    alice.save()
    assert apikeys.authenticate(live.plaintext) is not None
    Membership.objects.filter(user=alice, team=team_a).delete()
    assert apikeys.authenticate(live.plaintext) is None


def test_principal_carries_the_key_scopes_and_role_stays_the_users(victor, team_a):
    from sandboxes.policy import access

    key = apikeys.create_key(victor, team_a, scopes="admin").key
    principal = apikeys.principal_for(key, Channel.MCP, "127.0.0.1")
    assert principal.scopes == frozenset({"admin"}) and principal.channel == Channel.MCP
    # Even an admin-scoped key of a viewer cannot write: the role decides.
    with pytest.raises(access.PermissionDenied):
        access.require(principal, access.WRITE, "run commands")
    Membership.objects.filter(user=victor).update(role=Role.MEMBER)
    assert access.require(principal, access.WRITE, "run commands") == Role.MEMBER


def test_scopes_and_expiry_parsing(alice, team_a, bob):
    assert apikeys.normalise_scopes("write") == ["read", "write"]
    assert apikeys.normalise_scopes(["READ"]) == ["read"]
    with pytest.raises(apikeys.ApiKeyError, match="unknown scope"):
        apikeys.normalise_scopes("read,root")
    now = timezone.now()
    assert apikeys.parse_expiry("30d", now=now) == now + timedelta(days=30)
    assert apikeys.parse_expiry("12h", now=now) == now + timedelta(hours=12)
    assert apikeys.parse_expiry("2027-01-01").isoformat() == "2027-01-01T00:00:00+00:00"
    assert apikeys.parse_expiry("") is None
    with pytest.raises(apikeys.ApiKeyError):
        apikeys.parse_expiry("next tuesday")
    with pytest.raises(apikeys.ApiKeyError, match="not a member"):
        apikeys.create_key(bob, team_a)
    with pytest.raises(apikeys.ApiKeyError, match="past"):
        apikeys.create_key(alice, team_a, expires_at=now - timedelta(seconds=1))


def test_touch_records_last_use_without_writing_on_every_request(alice, team_a):
    key = apikeys.create_key(alice, team_a).key
    apikeys.touch(key, "192.0.2.7")
    row = ApiKey.objects.get(pk=key.pk)
    assert row.last_used_address == "192.0.2.7" and row.last_used_at is not None
    first = row.last_used_at
    apikeys.touch(key, "192.0.2.7")
    assert ApiKey.objects.get(pk=key.pk).last_used_at == first
    apikeys.touch(key, "not an address")
    assert ApiKey.objects.get(pk=key.pk).last_used_address is None


def test_create_api_key_command_prints_the_key_once(alice, team_a):
    out, err = StringIO(), StringIO()
    call_command(
        "create_api_key",
        "--user=alice",
        "--team=alpha",
        "--scopes=read",
        "--expires=30d",
        "--name=ci",
        stdout=out,
        stderr=err,
    )
    plaintext = out.getvalue().strip()
    key = apikeys.authenticate(plaintext)
    assert key is not None and key.scopes == ["read"] and key.name == "ci"
    assert key.expires_at > timezone.now() + timedelta(days=29)
    assert plaintext not in err.getvalue() and f"shk_{key.prefix}" in err.getvalue()


def test_create_api_key_command_can_print_the_claude_line(alice, team_a):
    out = StringIO()
    call_command(
        "create_api_key",
        "--user=alice",
        "--team=alpha",
        "--claude=http://h:8000/mcp/",
        stdout=out,
        stderr=StringIO(),
    )
    line = out.getvalue().strip()
    assert line.startswith("claude mcp add --transport http sandhub http://h:8000/mcp/ --header")
    key = line.split("Bearer ")[1].rstrip('"')
    assert apikeys.authenticate(key) is not None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--user=nobody", "--team=alpha"], "no user"),
        (["--user=alice", "--team=nowhere"], "no team"),
        (["--user=bob", "--team=alpha"], "not a member"),
        (["--user=alice", "--team=alpha", "--scopes=sudo"], "unknown scope"),
        (["--user=alice", "--team=alpha", "--expires=soon"], "neither a duration"),
    ],
)
def test_create_api_key_command_refuses_bad_arguments(alice, bob, team_a, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("create_api_key", *args, stdout=StringIO(), stderr=StringIO())
    assert not ApiKey.objects.exists()


@pytest.fixture
def staff(django_user_model) -> Client:
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw-unused-9")
    client = Client()
    client.force_login(root)
    return client


def test_admin_creates_a_key_shows_it_once_and_never_the_hash(staff, alice, team_a):
    response = staff.post(
        "/admin/tenants/apikey/add/",
        {"user": alice.pk, "team": team_a.pk, "name": "from admin", "scopes": ["read"]},
    )
    assert response.status_code == 302, response.content[:2000]
    key = ApiKey.objects.get(name="from admin")
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    plaintext = next(word for m in shown for word in m.split() if word.startswith("shk_"))
    assert apikeys.authenticate(plaintext) == key
    assert key.scopes == ["read"]
    assert AuditLog.objects.filter(action="apikey.create", channel=Channel.ADMIN).exists()
    # The page after the redirect shows the key; no page ever shows it (or the hash) again.
    assert plaintext.encode() in staff.get(response["Location"]).content
    for url in ["/admin/tenants/apikey/", f"/admin/tenants/apikey/{key.pk}/change/"]:
        page = staff.get(url)
        assert page.status_code == 200
        assert key.secret_hash.encode() not in page.content
        assert plaintext.encode() not in page.content
        assert f"shk_{key.prefix}".encode() in page.content


def test_admin_refuses_a_key_for_a_non_member(staff, bob, team_a):
    response = staff.post(
        "/admin/tenants/apikey/add/", {"user": bob.pk, "team": team_a.pk, "scopes": ["read"]}
    )
    assert response.status_code == 200 and b"not a member" in response.content
    assert not ApiKey.objects.exists()


def test_admin_revoke_action(staff, alice, team_a):
    keys = [apikeys.create_key(alice, team_a) for _ in range(2)]
    response = staff.post(
        "/admin/tenants/apikey/",
        {"action": "revoke_keys", "_selected_action": [keys[0].key.pk]},
    )
    assert response.status_code == 302
    assert apikeys.authenticate(keys[0].plaintext) is None
    assert apikeys.authenticate(keys[1].plaintext) is not None
    assert ApiKey.objects.get(pk=keys[0].key.pk).revoked_at is not None
    assert AuditLog.objects.filter(action="apikey.revoke").count() == 1
