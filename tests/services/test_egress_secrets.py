"""Secrets bound to destinations (issue 27): who may add and delete which, what is checked,
and that the value is never shown again, nor written in the audit log."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.contract.errors import Conflict, InvalidInput, NotFound, PermissionDenied
from sandboxes.models import EgressSecret
from tenants.models import AuditLog
from tenants.principal import Principal

pytestmark = pytest.mark.django_db

VALUE = "sk-test-0123456789abcdef"


def add(principal, **overrides):
    fields = {"name": "API_KEY", "hosts": ["api.test"], "value": VALUE, **overrides}
    return services.add_secret(principal, **fields)


def test_a_member_adds_his_own_and_never_sees_the_value_again(as_mallory, mallory, team_a):
    info = add(as_mallory)
    assert (info.name, info.hosts, info.header, info.template) == (
        "API_KEY",
        ["api.test"],
        "Authorization",
        "Bearer {value}",
    )
    assert (info.team_wide, info.owner, info.created_by) == (False, "mallory", "mallory")
    assert VALUE not in str(info.as_dict()) and VALUE not in str(services.list_secrets(as_mallory))
    row = EgressSecret.objects.get(pk=info.id)
    assert row.user == mallory and VALUE not in row.value_encrypted and VALUE not in repr(row)
    [audit] = AuditLog.objects.filter(action="egress.secret.add")
    assert (audit.outcome, audit.target_id) == ("ok", str(info.id))
    assert audit.details["name"] == "API_KEY" and VALUE not in str(audit.details)


def test_team_wide_secrets_are_for_owners_and_admins(as_alice, as_mallory, team_a):
    with pytest.raises(PermissionDenied, match="only a team owner or admin"):
        add(as_mallory, team_wide=True)
    team = add(as_alice, name="TEAM_KEY", team_wide=True, header="x-api-key", template="{value}")
    assert team.team_wide and team.owner is None
    # Members see the team's and their own, not another member's own.
    add(as_alice, name="ALICE_OWN")
    assert sorted(s.name for s in services.list_secrets(as_mallory)) == ["TEAM_KEY"]
    with pytest.raises(PermissionDenied, match="only a team owner or admin"):
        services.delete_secret(as_mallory, team.id)
    alice_own = [s for s in services.list_secrets(as_alice) if s.name == "ALICE_OWN"][0]
    with pytest.raises(NotFound):
        services.delete_secret(as_mallory, alice_own.id)
    services.delete_secret(as_alice, team.id)
    assert not EgressSecret.objects.filter(pk=team.id).exists()
    [audit] = AuditLog.objects.filter(action="egress.secret.delete", outcome="ok")
    assert audit.details == {"name": "TEAM_KEY", "team_wide": True}


def test_viewers_and_read_only_keys_change_nothing(as_victor, as_read_only_key, as_alice):
    own = add(as_alice)
    for principal in (as_victor, as_read_only_key):
        with pytest.raises(PermissionDenied):
            add(principal, name="OTHER")
        with pytest.raises(PermissionDenied):
            services.delete_secret(principal, own.id)
    assert EgressSecret.objects.count() == 1
    assert [s.name for s in services.list_secrets(as_victor)] == []  # alice's own is hers


def test_another_teams_secret_is_not_found(as_alice, as_bob):
    own = add(as_alice, team_wide=True)
    with pytest.raises(NotFound):
        services.delete_secret(as_bob, own.id)
    assert services.list_secrets(as_bob) == []
    assert EgressSecret.objects.filter(pk=own.id).exists()


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"value": ""}, "non-empty"),
        ({"value": "x" * 4097}, "at most 4096 bytes"),
        ({"value": "short"}, "at least 6 characters"),
        ({"value": "two\nlines"}, "one line"),
        ({"value": 42}, "non-empty string"),
        ({"name": "1ABC"}, "environment variable name"),
        ({"name": "HAS SPACE"}, "environment variable name"),
        ({"name": "HTTP_PROXY"}, "set by the platform"),
        ({"hosts": []}, "name 1 to 20 hosts"),
        ({"hosts": ["bad host!"]}, "is not a host name"),
        ({"hosts": ["*"]}, "everywhere"),
        ({"hosts": ["api.test:443"]}, "names only"),
        ({"header": "Bad Header"}, "HTTP header name"),
        ({"header": "Proxy-Authorization"}, "the proxy's own"),
        ({"template": "Bearer"}, "must contain {value}"),
        ({"template": "Bearer {value}\r\nX: y"}, "one line"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(as_alice, overrides, message):
    with pytest.raises(InvalidInput, match=message):
        add(as_alice, **overrides)
    assert EgressSecret.objects.count() == 0
    [audit] = AuditLog.objects.filter(action="egress.secret.add")
    assert audit.outcome == "invalid" and VALUE not in str(audit.details)


def test_a_name_once_per_scope(as_alice, as_mallory):
    add(as_alice)
    with pytest.raises(Conflict, match="exists already"):
        add(as_alice, value="another-value-1234")
    add(as_mallory)  # his own of the same name
    add(as_alice, team_wide=True)  # and the team's
    assert EgressSecret.objects.count() == 3


def test_platform_admins_see_and_delete_every_secret_of_the_team(as_mallory, team_a):
    own = add(as_mallory)
    system = Principal.system(team_a)
    assert [s.id for s in services.list_secrets(system)] == [own.id]
    services.delete_secret(system, own.id)
    assert not EgressSecret.objects.exists()
