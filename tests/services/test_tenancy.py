"""tenants.services: API keys and memberships change only there, each call authorized and
leaving exactly one audit row, from the command line, admin, or a team member alike."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tenants import apikeys, services
from tenants.errors import Conflict, NotFound, PermissionDenied
from tenants.models import ApiKey, AuditLog, Channel, Membership, Role, Team
from tenants.principal import Principal

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw-unused-5")


@pytest.fixture
def staff(root) -> Client:
    client = Client()
    client.force_login(root)
    return client


@pytest.fixture
def as_mallory(mallory, team_a) -> Principal:
    return Principal(user=mallory, team=team_a, channel=Channel.WEB)


def member(team: Team, username: str, role: str):
    user = get_user_model().objects.create_user(username, password="pw-unused-6")
    Membership.objects.create(user=user, team=team, role=role)
    return user


def rows(action: str) -> list[AuditLog]:
    return list(AuditLog.objects.filter(action=action).order_by("id"))


def role_of(user, team: Team) -> str:
    return Membership.objects.get(user=user, team=team).role


# --- API keys: the audit rows ----------------------------------------------------------------


def test_a_key_created_from_the_command_line_is_audited(alice, team_a) -> None:
    out = StringIO()
    call_command(
        "create_api_key", "--user=alice", "--team=alpha", "--scopes=read", stdout=out,
        stderr=StringIO(),
    )  # fmt: skip
    key = apikeys.authenticate(out.getvalue().strip())
    [row] = rows("apikey.create")
    assert (row.channel, row.actor, row.team, row.outcome) == (Channel.SYSTEM, None, team_a, "ok")
    assert (row.target_type, row.target_id) == ("apikey", key.prefix)
    assert row.details["user"] == "alice" and row.details["scopes"] == ["read"]
    assert row.details["via"] == "manage.py create_api_key"
    assert out.getvalue().strip() not in str(row.details)  # never the key itself


def test_a_refused_key_from_the_command_line_leaves_a_failure_row(bob, team_a) -> None:
    with pytest.raises(CommandError, match="not a member"):
        call_command(
            "create_api_key", "--user=bob", "--team=alpha", stdout=StringIO(), stderr=StringIO()
        )
    [row] = rows("apikey.create")
    assert (row.outcome, row.team, row.target_id) == ("invalid", team_a, "")
    assert "not a member" in row.details["error"]
    assert not ApiKey.objects.exists()


def test_a_key_created_in_admin_is_audited(staff, root, alice, team_a) -> None:
    response = staff.post(
        "/admin/tenants/apikey/add/",
        {"user": alice.pk, "team": team_a.pk, "name": "from admin", "scopes": ["write"]},
    )
    assert response.status_code == 302, response.content[:2000]
    key = ApiKey.objects.get(name="from admin")
    [row] = rows("apikey.create")
    assert (row.channel, row.actor, row.team, row.outcome) == (Channel.ADMIN, root, team_a, "ok")
    assert (row.target_id, row.source_address) == (key.prefix, "127.0.0.1")
    assert row.details["scopes"] == ["read", "write"]


def test_admin_refuses_an_expired_key_on_the_form(staff, alice, team_a) -> None:
    past = timezone.localtime() - timedelta(days=1)
    response = staff.post(
        "/admin/tenants/apikey/add/",
        {
            "user": alice.pk,
            "team": team_a.pk,
            "scopes": ["read"],
            "expires_at_0": past.strftime("%Y-%m-%d"),  # admin splits date and time
            "expires_at_1": past.strftime("%H:%M:%S"),
        },
    )
    assert response.status_code == 200 and b"in the past" in response.content
    assert not ApiKey.objects.exists()


def test_revoking_is_audited_from_services_and_admin(staff, root, as_alice, alice, team_a) -> None:
    first, _ = services.create_api_key(as_alice, alice, team_a, "one")
    second, _ = services.create_api_key(as_alice, alice, team_a, "two")

    services.revoke_api_key(as_alice, first)
    assert ApiKey.objects.get(pk=first.pk).revoked and first.revoked_at is not None
    change = reverse("admin:tenants_apikey_change", args=[second.pk])
    response = staff.post(change, {"name": "two, renamed", "revoked": "on", "expires_at": ""})
    assert response.status_code == 302, response.content[:2000]

    second.refresh_from_db()
    assert second.revoked and second.name == "two, renamed"
    revokes = rows("apikey.revoke")
    assert [(r.channel, r.actor, r.target_id) for r in revokes] == [
        (Channel.WEB, alice, first.prefix),
        (Channel.ADMIN, root, second.prefix),
    ]
    [rename] = rows("apikey.update")
    assert rename.details["changed"] == {"name": ["two", "two, renamed"]}


def test_deleting_a_key_in_admin_is_audited(staff, alice, team_a) -> None:
    key = apikeys.create_key(alice, team_a).key
    delete = reverse("admin:tenants_apikey_delete", args=[key.pk])
    assert staff.post(delete, {"post": "yes"}).status_code == 302
    assert not ApiKey.objects.exists()
    [row] = rows("apikey.delete")
    assert (row.channel, row.outcome, row.target_id) == (Channel.ADMIN, "ok", key.prefix)


# --- API keys: who may ------------------------------------------------------------------------


def test_keys_are_personal(as_alice, alice, mallory, team_a) -> None:
    with pytest.raises(PermissionDenied, match="only for yourself"):
        services.create_api_key(as_alice, mallory, team_a)
    assert not ApiKey.objects.exists()
    [row] = rows("apikey.create")
    assert (row.outcome, row.actor, row.details["user"]) == ("forbidden", alice, "mallory")


def test_a_team_admin_may_revoke_a_members_key_and_a_member_may_not(
    as_mallory, mallory, alice, team_a
) -> None:
    alices_key, _ = services.create_api_key(Principal.system(team_a), alice, team_a)
    with pytest.raises(PermissionDenied, match="owner or admin"):
        services.revoke_api_key(as_mallory, alices_key)
    assert not ApiKey.objects.get(pk=alices_key.pk).revoked

    mallorys_key, _ = services.create_api_key(as_mallory, mallory, team_a)
    ruth = member(team_a, "ruth", Role.ADMIN)
    services.revoke_api_key(Principal(user=ruth, team=team_a), mallorys_key)
    assert ApiKey.objects.get(pk=mallorys_key.pk).revoked
    assert [r.outcome for r in rows("apikey.revoke")] == ["forbidden", "ok"]


def test_another_teams_key_answers_as_missing(as_bob, alice, team_a, team_b) -> None:
    key, _ = services.create_api_key(Principal.system(team_a), alice, team_a)
    with pytest.raises(NotFound, match=f"shk_{key.prefix} not found"):
        services.revoke_api_key(as_bob, key)
    assert not ApiKey.objects.get(pk=key.pk).revoked
    # The refusal is filed under the team that tried, not the one whose key it was.
    [row] = rows("apikey.revoke")
    assert (row.outcome, row.team) == ("not_found", team_b)


def test_keys_are_managed_through_a_key_only_with_its_admin_scope(alice, team_a) -> None:
    write_key = apikeys.create_key(alice, team_a, scopes="write").key
    through_write = apikeys.principal_for(write_key, Channel.API)
    with pytest.raises(PermissionDenied, match="no admin scope"):
        services.create_api_key(through_write, alice, team_a, scopes="admin")
    with pytest.raises(PermissionDenied, match="no admin scope"):
        services.revoke_api_key(through_write, write_key)
    assert ApiKey.objects.count() == 1 and not ApiKey.objects.get().revoked

    admin_key = apikeys.create_key(alice, team_a, scopes="admin").key
    through_admin = apikeys.principal_for(admin_key, Channel.API)
    services.revoke_api_key(through_admin, write_key)
    assert ApiKey.objects.get(pk=write_key.pk).revoked
    assert rows("apikey.revoke")[-1].details["api_key"] == admin_key.prefix


def test_only_platform_admins_delete_keys(as_alice, alice, team_a) -> None:
    key, _ = services.create_api_key(as_alice, alice, team_a)
    with pytest.raises(PermissionDenied, match="revoke it instead"):
        services.delete_api_key(as_alice, key)
    assert ApiKey.objects.filter(pk=key.pk).exists()


# --- memberships -----------------------------------------------------------------------------


def test_a_membership_change_is_audited(as_alice, alice, mallory, bob, team_a) -> None:
    added = services.add_member(as_alice, team_a, bob, Role.VIEWER)
    services.change_role(as_alice, added, Role.MEMBER)
    services.remove_member(as_alice, Membership.objects.get(user=mallory, team=team_a))

    assert role_of(bob, team_a) == Role.MEMBER
    assert not Membership.objects.filter(user=mallory, team=team_a).exists()
    trail = list(AuditLog.objects.filter(action__startswith="membership.").order_by("id"))
    assert [(r.action, r.target_id, r.outcome) for r in trail] == [
        ("membership.add", "bob", "ok"),
        ("membership.change_role", "bob", "ok"),
        ("membership.remove", "mallory", "ok"),
    ]
    assert {(r.actor, r.team, r.channel) for r in trail} == {(alice, team_a, Channel.WEB)}
    assert trail[1].details["previous_role"] == Role.VIEWER
    assert trail[1].details["role"] == Role.MEMBER


def test_a_refused_change_leaves_a_failure_row_and_changes_nothing(
    as_mallory, mallory, victor, team_a
) -> None:
    membership = Membership.objects.get(user=victor, team=team_a)
    with pytest.raises(PermissionDenied, match="owner or admin"):
        services.change_role(as_mallory, membership, Role.ADMIN)
    assert role_of(victor, team_a) == Role.VIEWER
    [row] = rows("membership.change_role")
    assert (row.outcome, row.actor, row.team, row.target_id) == (
        "forbidden",
        mallory,
        team_a,
        "victor",
    )
    assert "owner or admin" in row.details["error"]


def test_owner_rules(alice, mallory, victor, team_a) -> None:
    ruth = member(team_a, "ruth", Role.ADMIN)
    as_ruth = Principal(user=ruth, team=team_a)
    as_alice = Principal(user=alice, team=team_a)
    alices = Membership.objects.get(user=alice, team=team_a)
    # An admin manages members, but the owner role is the owners' to give and take.
    services.change_role(as_ruth, Membership.objects.get(user=victor), Role.MEMBER)
    with pytest.raises(PermissionDenied, match="only an owner"):
        services.change_role(as_ruth, Membership.objects.get(user=mallory), Role.OWNER)
    with pytest.raises(PermissionDenied, match="only an owner"):
        services.remove_member(as_ruth, alices)
    # The last owner can neither step down nor leave...
    with pytest.raises(Conflict, match="without an owner"):
        services.change_role(as_alice, alices, Role.MEMBER)
    with pytest.raises(Conflict, match="without an owner"):
        services.remove_member(as_alice, alices)
    assert role_of(alice, team_a) == Role.OWNER
    # ...until there is another one; and anyone may leave.
    services.change_role(as_alice, Membership.objects.get(user=ruth), Role.OWNER)
    services.remove_member(as_alice, alices)
    services.remove_member(Principal(user=victor, team=team_a), Membership.objects.get(user=victor))
    assert set(Membership.objects.values_list("user__username", "role")) == {
        ("mallory", Role.MEMBER),
        ("ruth", Role.OWNER),
    }
    outcomes = [r.outcome for r in AuditLog.objects.order_by("id")]
    assert outcomes == ["ok", "forbidden", "forbidden", "conflict", "conflict", "ok", "ok", "ok"]


def test_another_team_and_duplicates_are_refused(as_alice, as_bob, alice, bob, team_a) -> None:
    with pytest.raises(NotFound, match="team alpha not found"):
        services.add_member(as_bob, team_a, bob, Role.OWNER)
    with pytest.raises(Conflict, match="already a member"):
        services.add_member(as_alice, team_a, alice, Role.MEMBER)
    assert not Membership.objects.filter(user=bob, team=team_a).exists()
    assert [r.outcome for r in rows("membership.add")] == ["not_found", "conflict"]


def test_admin_membership_edits_go_through_the_services(
    staff, root, alice, mallory, bob, team_a
) -> None:
    memberships = list(Membership.objects.filter(team=team_a).order_by("pk"))
    form = {
        "slug": team_a.slug,
        "name": team_a.name,
        "max_running_sandboxes": "3",
        "max_cpus_per_sandbox": "2.0",
        "max_memory_mb_per_sandbox": "2048",
        "max_disk_mb_per_sandbox": "5120",
        "max_snapshots": "10",
        "max_snapshot_mb": "20480",
        "default_lifetime_minutes": "60",
        "max_lifetime_minutes": "1440",
        "idle_timeout_minutes": "30",
        "idle_action": "delete",
        "stop_paused_after_hours": "24",
        "delete_stopped_after_days": "7",
        "max_paused_sandboxes": "5",
        "max_paused_memory_mb": "8192",
        "max_stopped_sandboxes": "10",
        "allowed_preview_ports": "1024-65535",
        "max_previews_per_sandbox": "5",
        "egress_max_mode": "public",
        "egress_allowlist": "[]",
        "egress_allowed_ranges": "[]",
        "memberships-TOTAL_FORMS": "3",
        "memberships-INITIAL_FORMS": "2",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        # alice stays owner; mallory becomes an admin; bob joins as a viewer.
        "memberships-0-id": str(memberships[0].pk),
        "memberships-0-user": str(alice.pk),
        "memberships-0-role": Role.OWNER,
        "memberships-1-id": str(memberships[1].pk),
        "memberships-1-user": str(mallory.pk),
        "memberships-1-role": Role.ADMIN,
        "memberships-2-user": str(bob.pk),
        "memberships-2-role": Role.VIEWER,
    }
    change = reverse("admin:tenants_team_change", args=[team_a.pk])
    response = staff.post(change, form)
    assert response.status_code == 302, response.content[:3000]
    assert role_of(mallory, team_a) == Role.ADMIN and role_of(bob, team_a) == Role.VIEWER

    # Removing a member from the team's page, then from the memberships list.
    form.update({"memberships-INITIAL_FORMS": "3", "memberships-TOTAL_FORMS": "3"})
    form["memberships-2-id"] = str(Membership.objects.get(user=bob, team=team_a).pk)
    form["memberships-2-DELETE"] = "on"
    assert staff.post(change, form).status_code == 302
    delete = reverse("admin:tenants_membership_delete", args=[memberships[1].pk])
    assert staff.post(delete, {"post": "yes"}).status_code == 302
    assert list(team_a.memberships.values_list("user__username", flat=True)) == ["alice"]

    trail = list(AuditLog.objects.filter(action__startswith="membership.").order_by("id"))
    assert [(r.action, r.target_id) for r in trail] == [
        ("membership.change_role", "mallory"),
        ("membership.add", "bob"),
        ("membership.remove", "bob"),
        ("membership.remove", "mallory"),
    ]
    assert {(r.channel, r.actor, r.team, r.outcome) for r in trail} == {
        (Channel.ADMIN, root, team_a, "ok")
    }


def test_admin_cannot_move_a_membership_to_another_user(staff, mallory, bob, team_a) -> None:
    membership = Membership.objects.get(user=mallory)
    change = reverse("admin:tenants_membership_change", args=[membership.pk])
    response = staff.post(change, {"user": bob.pk, "team": team_a.pk, "role": Role.ADMIN})
    assert response.status_code == 302
    membership.refresh_from_db()
    # user and team are read-only on the change page: only the role changed.
    assert (membership.user, membership.role) == (mallory, Role.ADMIN)
    assert rows("membership.change_role")[0].details["previous_role"] == Role.MEMBER
