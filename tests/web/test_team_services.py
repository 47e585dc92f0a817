"""sandboxes/services/team.py: usage against limits, my keys, members by id or username, the
team's audit log and command history. One audit row per call, another team's row not found."""

from __future__ import annotations

import dataclasses

import pytest

from hosts.models import Host, Image
from sandboxes import services
from sandboxes.contract.errors import InvalidInput, NotFound, PermissionDenied
from sandboxes.services import team
from tenants import apikeys
from tenants.models import AuditLog, Channel, Membership, Role
from tenants.principal import Principal

pytestmark = pytest.mark.django_db


def rows(action: str) -> list[AuditLog]:
    return list(AuditLog.objects.filter(action=action))


@pytest.mark.audit_views
def test_usage_against_limits(as_alice, as_bob, team_a, fake_backend):
    services.create_sandbox(as_alice, cpus=1.5, memory_mb=512, disk_mb=100)
    services.create_sandbox(as_alice, cpus=0.5, memory_mb=256, disk_mb=200)
    services.create_sandbox(as_bob, cpus=2, memory_mb=1024)  # another team's: not counted
    usage = team.team_usage(as_alice)
    assert (usage.running, usage.max_running) == (2, 3)
    assert (usage.cpus_in_use, usage.memory_mb_in_use, usage.disk_mb_in_use) == (2.0, 768, 300)
    assert usage.max_cpus_per_sandbox == team_a.max_cpus_per_sandbox
    assert [i.name for i in usage.images] == ["python"] and usage.default_image == "python"
    assert usage.gpu_hosts is False and usage.allow_network is False
    [row] = rows("team.usage")
    assert (row.outcome, row.target_id, row.team) == ("ok", "alpha", team_a)


def test_usage_images_the_team_may_use_and_gpu_hosts(as_alice, team_a, team_b, image):
    private = Image.objects.create(name="beta-only", reference="x")
    private.teams.add(team_b)
    Host.objects.create(name="gpu", kind="docker", endpoint="unix:///x", gpu_percent=10)
    usage = team.team_usage(as_alice)
    assert [i.name for i in usage.images] == ["python"]
    assert usage.gpu_hosts is True


def test_usage_needs_a_member(alice, bob, team_a):
    outsider = Principal(user=bob, team=team_a, channel=Channel.WEB)
    with pytest.raises(PermissionDenied):
        team.team_usage(outsider)
    assert rows("team.usage")[0].outcome == "forbidden"


@pytest.mark.audit_views
def test_my_keys(as_alice, alice, mallory, team_a, team_b, bob):
    mine = apikeys.create_key(alice, team_a, name="mine").key
    apikeys.create_key(mallory, team_a, name="theirs")
    apikeys.create_key(bob, team_b, name="other team")
    assert [k.pk for k in team.list_my_api_keys(as_alice)] == [mine.pk]
    assert len(rows("apikey.list")) == 1


def test_revoke_by_id_one_row_and_not_found_across_teams(as_alice, alice, bob, team_a, team_b):
    mine = apikeys.create_key(alice, team_a).key
    theirs = apikeys.create_key(bob, team_b).key
    assert team.revoke_api_key_by_id(as_alice, mine.pk).revoked
    [row] = rows("apikey.revoke")
    assert (row.outcome, row.target_id) == ("ok", mine.prefix)
    with pytest.raises(NotFound):
        team.revoke_api_key_by_id(as_alice, theirs.pk)
    theirs.refresh_from_db()
    assert not theirs.revoked
    assert [r.outcome for r in rows("apikey.revoke")] == ["not_found", "ok"]


@pytest.mark.audit_views
def test_members_owners_first_managers_only(as_alice, as_victor, mallory, victor):
    names = [m.user.username for m in team.list_members(as_alice)]
    assert names == ["alice", "mallory", "victor"]
    with pytest.raises(PermissionDenied, match="only a team owner or admin"):
        team.list_members(as_victor)
    assert [r.outcome for r in rows("membership.list")] == ["forbidden", "ok"]


def test_manager_through_a_key_needs_the_admin_scope(as_alice):
    keyed = dataclasses.replace(as_alice, channel=Channel.API, scopes=frozenset({"read"}))
    with pytest.raises(PermissionDenied, match="admin scope"):
        team.list_members(keyed)


def test_add_by_username(as_alice, as_victor, bob, team_a):
    with pytest.raises(PermissionDenied):
        team.add_member_by_username(as_victor, "bob", Role.MEMBER)
    with pytest.raises(InvalidInput, match="no user named 'ghost'"):
        team.add_member_by_username(as_alice, "ghost", Role.MEMBER)
    added = team.add_member_by_username(as_alice, " bob ", Role.VIEWER)
    assert (added.user, added.team, added.role) == (bob, team_a, Role.VIEWER)
    # One row per call, the action of tenants.services.add_member.
    assert [r.outcome for r in rows("membership.add")] == ["ok", "invalid", "forbidden"]


def test_role_and_remove_by_id_not_found_across_teams(as_alice, mallory, bob, team_a, team_b):
    theirs = Membership.objects.get(user=bob, team=team_b)
    with pytest.raises(NotFound):
        team.change_member_role(as_alice, theirs.pk, Role.VIEWER)
    with pytest.raises(NotFound):
        team.remove_member_by_id(as_alice, theirs.pk)
    assert Membership.objects.get(pk=theirs.pk).role == Role.MEMBER
    ours = Membership.objects.get(user=mallory, team=team_a)
    assert team.change_member_role(as_alice, ours.pk, Role.ADMIN).role == Role.ADMIN
    team.remove_member_by_id(as_alice, ours.pk)
    assert not Membership.objects.filter(pk=ours.pk).exists()
    assert [r.outcome for r in rows("membership.change_role")] == ["ok", "not_found"]
    assert [r.outcome for r in rows("membership.remove")] == ["ok", "not_found"]


def test_audit_log_team_only_and_filters(as_alice, as_bob, as_victor, fake_backend):
    services.create_sandbox(as_alice)
    services.create_sandbox(as_bob)
    log = team.team_audit_log(as_alice)
    assert {r.team.slug for r in log} == {"alpha"}
    assert list(
        team.team_audit_log(as_alice, action="sandbox.cr").values_list("action", flat=True)
    ) == ["sandbox.create"]
    assert not team.team_audit_log(as_alice, actor="bob").exists()
    assert team.team_audit_log(as_alice, channel="web").exists()
    with pytest.raises(InvalidInput, match="unknown channel"):
        team.team_audit_log(as_alice, channel="fax")
    with pytest.raises(InvalidInput, match="unknown kind"):
        team.team_audit_log(as_alice, kind="everything")


def test_audit_log_filters_by_kind(as_alice, fake_backend):
    created = services.create_sandbox(as_alice)
    services.write_file(as_alice, created.id, "/workspace/a.txt", "hi")
    services.read_file(as_alice, created.id, "/workspace/a.txt")
    reads = team.team_audit_log(as_alice, kind="read")
    assert list(reads.values_list("action", flat=True)) == ["files.read"]
    changes = set(team.team_audit_log(as_alice, kind="change").values_list("action", flat=True))
    assert changes == {"sandbox.create", "files.write"}


def test_only_managers_read_the_audit_log(as_victor):
    with pytest.raises(PermissionDenied):
        team.team_audit_log(as_victor)


@pytest.mark.audit_views
def test_team_commands(as_alice, as_bob, as_victor, fake_backend):
    mine = services.create_sandbox(as_alice)
    theirs = services.create_sandbox(as_bob)
    services.run_command(as_alice, mine.id, "echo ok")
    services.run_command(as_alice, mine.id, "exit 1")
    services.run_command(as_bob, theirs.id, "echo beta")
    assert [c.command for c in team.team_commands(as_alice)] == ["exit 1", "echo ok"]
    assert [c.command for c in team.team_commands(as_alice, status="failed")] == ["exit 1"]
    with pytest.raises(InvalidInput, match="unknown status"):
        team.team_commands(as_alice, status="weird")
    with pytest.raises(PermissionDenied):
        team.team_commands(as_victor)
    assert len(rows("command.list_team")) == 4
