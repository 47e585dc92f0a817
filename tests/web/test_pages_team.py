"""Team page (owners and admins): members and roles, the audit log, the command history."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sandboxes import services
from sandboxes.models import CommandExecution, CommandStatus
from tenants.models import AuditLog, Membership, Role
from tests.web.helpers import field_errors

pytestmark = pytest.mark.django_db

TEAM_PAGES = ["/team/", "/team/audit/", "/team/commands/"]


@pytest.fixture
def admin_user(django_user_model, team_a):
    user = django_user_model.objects.create_user("adele", password="x")
    Membership.objects.create(user=user, team=team_a, role=Role.ADMIN)
    return user


@pytest.mark.parametrize("url", TEAM_PAGES)
def test_owner_and_admin_see_the_team_pages(login, alice, admin_user, url):
    for user in (alice, admin_user):
        assert login(user).get(url).status_code == 200


@pytest.mark.parametrize("url", TEAM_PAGES)
def test_members_and_viewers_are_refused(login, mallory, victor, url):
    for user in (mallory, victor):
        response = login(user).get(url)
        assert response.status_code == 403
        assert "only a team owner or admin may" in response.content.decode()


def test_members_page_lists_my_team(login, alice, mallory, victor, bob):
    page = login(alice).get("/team/").content.decode()
    for name in ("alice", "mallory", "victor"):
        assert f'data-username="{name}"' in page
    assert 'data-username="bob"' not in page
    assert page.index('data-username="alice"') < page.index('data-username="mallory"')


def test_add_an_existing_user(login, alice, bob, team_a):
    response = login(alice).post("/team/members/add/", {"username": "bob", "role": "viewer"})
    assert response.status_code == 302
    assert Membership.objects.get(user=bob, team=team_a).role == Role.VIEWER
    row = AuditLog.objects.get(action="membership.add")
    assert (row.outcome, row.channel, row.team) == ("ok", "web", team_a)


@pytest.mark.parametrize(
    "data,field,message",
    [
        ({"username": "nobody", "role": "member"}, "username", "no user named 'nobody'"),
        ({"username": "", "role": "member"}, "username", "This field is required"),
        ({"username": "bob", "role": "god"}, "role", "Select a valid choice"),
        ({"username": "mallory", "role": "member"}, "username", "already a member"),
    ],
)
def test_add_bad_input_beside_the_field(login, alice, mallory, bob, data, field, message):
    before = Membership.objects.count()
    response = login(alice).post("/team/members/add/", data)
    assert response.status_code in (400, 409)
    assert any(message in e for e in field_errors(response.content.decode(), field))
    assert Membership.objects.count() == before


def test_admin_may_not_make_an_owner(login, admin_user, bob):
    response = login(admin_user).post("/team/members/add/", {"username": "bob", "role": "owner"})
    assert response.status_code == 403
    assert "only an owner may make a member owner" in response.content.decode()
    assert not Membership.objects.filter(user=bob).exclude(team__slug="beta").exists()


def test_member_may_not_add(login, mallory, bob, team_a):
    response = login(mallory).post("/team/members/add/", {"username": "bob", "role": "member"})
    assert response.status_code == 403
    assert not Membership.objects.filter(user=bob, team=team_a).exists()


def test_change_role(login, alice, mallory, team_a):
    membership = Membership.objects.get(user=mallory, team=team_a)
    response = login(alice).post(f"/team/members/{membership.pk}/role/", {"role": "admin"})
    assert response.status_code == 302
    membership.refresh_from_db()
    assert membership.role == Role.ADMIN


def test_change_role_bad_value(login, alice, mallory, team_a):
    membership = Membership.objects.get(user=mallory, team=team_a)
    response = login(alice).post(f"/team/members/{membership.pk}/role/", {"role": "x"}, follow=True)
    assert "Choose one of the roles" in response.content.decode()
    membership.refresh_from_db()
    assert membership.role == Role.MEMBER


def test_last_owner_stays(login, alice, team_a):
    membership = Membership.objects.get(user=alice, team=team_a)
    response = login(alice).post(f"/team/members/{membership.pk}/role/", {"role": "member"})
    assert response.status_code == 409
    assert "without an owner" in response.content.decode()
    membership.refresh_from_db()
    assert membership.role == Role.OWNER


def test_remove_member(login, alice, mallory, team_a):
    membership = Membership.objects.get(user=mallory, team=team_a)
    assert login(alice).post(f"/team/members/{membership.pk}/remove/").status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_another_teams_membership_is_not_found(login, alice, bob, team_b):
    membership = Membership.objects.get(user=bob, team=team_b)
    client = login(alice)
    for url, data in (
        (f"/team/members/{membership.pk}/role/", {"role": "viewer"}),
        (f"/team/members/{membership.pk}/remove/", {}),
    ):
        response = client.post(url, data)
        assert response.status_code == 404, url
    membership.refresh_from_db()
    assert membership.role == Role.MEMBER


def test_viewer_refused_on_member_changes(login, victor, mallory, team_a):
    membership = Membership.objects.get(user=mallory, team=team_a)
    client = login(victor)
    assert (
        client.post(f"/team/members/{membership.pk}/role/", {"role": "viewer"}).status_code == 403
    )
    assert client.post(f"/team/members/{membership.pk}/remove/").status_code == 403
    membership.refresh_from_db()
    assert membership.role == Role.MEMBER


# --- audit log -------------------------------------------------------------------------------


@pytest.mark.audit_views
def test_audit_log_shows_my_team_and_filters(login, alice, as_alice, as_bob, bob, fake_backend):
    services.create_sandbox(as_alice, name="a1")
    services.create_sandbox(as_bob, name="b1")
    client = login(alice)
    page = client.get("/team/audit/").content.decode()
    assert "sandbox.create" in page and page.count('class="audit-row') >= 1
    assert "bob" not in page  # another team's rows never show
    only_lists = client.get("/team/audit/?action=sandbox.list").content.decode()
    assert "<code>sandbox.create</code>" not in only_lists
    by_channel = client.get("/team/audit/?channel=api").content.decode()
    assert "No audit rows match" in by_channel
    by_actor = client.get("/team/audit/?actor=mallory").content.decode()
    assert "No audit rows match" in by_actor
    views = client.get("/team/audit/?kind=view").content.decode()
    assert "<code>audit.list</code>" in views and "<code>sandbox.create</code>" not in views
    changes = client.get("/team/audit/?kind=change").content.decode()
    assert "<code>sandbox.create</code>" in changes and "<code>audit.list</code>" not in changes
    assert client.get("/team/audit/?kind=everything").status_code == 400
    future = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert "No audit rows match" in client.get(f"/team/audit/?since={future}").content.decode()
    # Reading the log is itself on record.
    assert AuditLog.objects.filter(action="audit.list", actor=alice).count() == 8


def test_audit_log_time_filter_in_the_readers_timezone(login, alice, as_alice, fake_backend):
    services.create_sandbox(as_alice)
    now = timezone.now()
    # A reader at UTC+2 types local times; getTimezoneOffset() is -120 there.
    local = (now + timedelta(hours=2) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    page = login(alice).get(f"/team/audit/?since={local}&tz=-120").content.decode()
    assert "sandbox.create" in page
    later = (now + timedelta(hours=2) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    page = login(alice).get(f"/team/audit/?since={later}&tz=-120").content.decode()
    assert "<code>sandbox.create</code>" not in page


def test_audit_log_bad_filter_beside_the_field(login, alice):
    response = login(alice).get("/team/audit/?since=2026-01-02T00:00&until=2026-01-01T00:00")
    assert response.status_code == 400
    assert field_errors(response.content.decode(), "until") == ["Must be after From."]
    response = login(alice).get("/team/audit/?channel=carrier-pigeon")
    assert any("valid choice" in e for e in field_errors(response.content.decode(), "channel"))


@pytest.mark.audit_views
def test_audit_log_paginates(login, alice, as_alice, fake_backend):
    for _ in range(60):
        services.list_sandboxes(as_alice)
    client = login(alice)
    first = client.get("/team/audit/?action=sandbox.list").content.decode()
    assert first.count('class="audit-row') == 50 and "Page 1 of 2" in first
    assert "action=sandbox.list&amp;page=2" in first
    second = client.get("/team/audit/?action=sandbox.list&page=2").content.decode()
    assert second.count('class="audit-row') >= 10


# --- command history -------------------------------------------------------------------------


def test_command_history_across_sandboxes(login, alice, as_alice, as_bob, fake_backend):
    one = services.create_sandbox(as_alice, name="one")
    two = services.create_sandbox(as_alice, name="two")
    theirs = services.create_sandbox(as_bob, name="theirs")
    services.run_command(as_alice, one.id, "echo first")
    services.run_command(as_alice, two.id, "exit 3")
    services.run_command(as_bob, theirs.id, "echo secret-of-beta")
    services.delete_sandbox(as_alice, two.id)
    client = login(alice)
    page = client.get("/team/commands/").content.decode()
    assert "echo first" in page and "exit 3" in page and "(deleted)" in page
    first = CommandExecution.objects.get(command="echo first")
    assert f'href="/sandboxes/{one.id}/commands/{first.pk}/"' in page  # its full output
    assert "secret-of-beta" not in page
    failed = client.get("/team/commands/?status=failed").content.decode()
    assert "exit 3" in failed and "echo first" not in failed
    assert CommandExecution.objects.filter(status=CommandStatus.FAILED).count() == 1
    bad = client.get("/team/commands/?status=exploded")
    assert bad.status_code == 400
    assert any("valid choice" in e for e in field_errors(bad.content.decode(), "status"))


def test_command_history_empty_state(login, alice):
    assert "No command matches" in login(alice).get("/team/commands/").content.decode()
