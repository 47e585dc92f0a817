"""The web pages' shell: sign-in required, Django's login / logout / password change, CSRF on
every form, the team switcher and the header."""

from __future__ import annotations

import pytest

from sandboxes.models import Sandbox
from tenants.models import ApiKey, Membership, Role, Team
from tests.web.helpers import field_errors

pytestmark = pytest.mark.django_db

PAGES = ["/", "/hosts/", "/keys/", "/team/", "/team/audit/", "/team/commands/", "/password/"]
POSTS = [
    "/sandboxes/create/",
    "/sandboxes/sb_abcdef123/delete/",
    "/keys/",
    "/keys/1/revoke/",
    "/team/members/add/",
    "/team/members/1/role/",
    "/team/members/1/remove/",
    "/switch-team/",
]


@pytest.mark.parametrize("url", PAGES + POSTS)
def test_anonymous_is_sent_to_login(client, url):
    response = client.post(url) if url in POSTS else client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_login_page_then_home(client, alice, image):
    page = client.get("/login/")
    assert page.status_code == 200
    assert b'name="username"' in page.content and b"csrfmiddlewaretoken" in page.content
    alice.set_password("s3cret-enough")
    alice.save()
    response = client.post("/login/", {"username": "alice", "password": "s3cret-enough"})
    assert response.status_code == 302 and response["Location"] == "/"
    home = client.get("/")
    assert home.status_code == 200
    assert b"Team Alpha" in home.content and b"alice" in home.content


def test_login_keeps_next(client, alice):
    alice.set_password("s3cret-enough")
    alice.save()
    response = client.post(
        "/login/?next=/hosts/",
        {"username": "alice", "password": "s3cret-enough", "next": "/hosts/"},
    )
    assert response["Location"] == "/hosts/"


def test_login_wrong_password_says_so(client, alice):
    response = client.post("/login/", {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content
    assert "_auth_user_id" not in client.session


def test_logout_is_post_only(login, alice, team_a):
    client = login(alice)
    assert client.get("/logout/").status_code == 405
    response = client.post("/logout/")
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert client.get("/").status_code == 302


def test_password_change(login, alice, team_a):
    alice.set_password("old-password-1")
    alice.save()
    client = login(alice)
    page = client.get("/password/")
    assert page.status_code == 200 and b'name="old_password"' in page.content
    wrong = client.post(
        "/password/",
        {
            "old_password": "nope",
            "new_password1": "n3w-pass-word",
            "new_password2": "n3w-pass-word",
        },
    )
    assert wrong.status_code == 200
    assert field_errors(wrong.content.decode(), "old_password")
    done = client.post(
        "/password/",
        {
            "old_password": "old-password-1",
            "new_password1": "n3w-pass-word",
            "new_password2": "n3w-pass-word",
        },
    )
    assert done.status_code == 302 and done["Location"] == "/password/done/"
    assert client.get("/password/done/").status_code == 200
    alice.refresh_from_db()
    assert alice.check_password("n3w-pass-word")


def test_admin_login_stays_at_admin(client):
    response = client.get("/admin/login/")
    assert response.status_code == 200
    assert b"Sandhub administration" in response.content


def test_user_in_no_team_is_told_so(login, django_user_model):
    loner = django_user_model.objects.create_user("loner", password="x")
    response = login(loner).get("/")
    assert response.status_code == 403
    assert b"not in a team yet" in response.content


def test_header_nav_and_team_link_only_for_managers(login, alice, mallory, team_a):
    owner_page = login(alice).get("/").content.decode()
    for label in ("Sandboxes", "Hosts", "API keys", 'href="/team/"', "Log out", "Password"):
        assert label in owner_page
    member_page = login(mallory).get("/").content.decode()
    assert 'href="/team/"' not in member_page
    assert 'id="team-switch-select"' not in member_page  # one team: no switcher


def test_static_files_are_served(client):
    from django.contrib.staticfiles import finders

    for name in ("web/app.css", "web/app.js", "web/htmx.min.js"):
        assert finders.find(name), name


# --- team switcher ---------------------------------------------------------------------------


@pytest.fixture
def two_teams(alice, team_b, fake_backend):
    """alice: owner of Alpha, viewer of Beta; Beta has a sandbox of its own."""
    Membership.objects.create(user=alice, team=team_b, role=Role.VIEWER)
    return alice


def test_switch_team(login, two_teams, team_b, bob):
    from sandboxes import services
    from tenants.models import Channel
    from tenants.principal import Principal

    beta = services.create_sandbox(Principal(user=bob, team=team_b, channel=Channel.WEB))
    client = login(two_teams)
    home = client.get("/").content.decode()
    assert 'id="team-switch-select"' in home and beta.id not in home
    response = client.post("/switch-team/", {"team": "beta"})
    assert response.status_code == 302 and response["Location"] == "/"
    home = client.get("/").content.decode()
    assert beta.id in home and "Team Beta" in home
    # A viewer there: no create form, no delete buttons.
    assert 'id="create-form"' not in home and "delete-sandbox" not in home


def test_switch_to_a_team_not_mine_changes_nothing(login, two_teams):
    Team.objects.create(slug="gamma", name="Team Gamma")
    client = login(two_teams)
    response = client.post("/switch-team/", {"team": "gamma"}, follow=True)
    assert b"You are not a member of team" in response.content
    assert "Team Alpha" in response.content.decode()
    assert client.session.get("sandhub_team") is None


def test_a_left_team_in_the_session_falls_back(login, alice, team_a, team_b):
    client = login(alice, team_slug="beta")  # never a member of beta
    page = client.get("/").content.decode()
    assert "Team Alpha" in page


# --- CSRF ------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", POSTS + ["/logout/"])
def test_csrf_is_enforced(login, alice, team_a, fake_backend, url):
    before = (Sandbox.objects.count(), ApiKey.objects.count(), Membership.objects.count())
    client = login(alice, csrf=True)
    data = {
        "image": "python",
        "cpus": "1",
        "memory_mb": "256",
        "disk_mb": "256",
        "lifetime_minutes": "10",
        "scopes": ["read"],
        "username": "alice",
        "role": "member",
        "team": "alpha",
    }
    response = client.post(url, data)
    assert response.status_code == 403
    assert b"CSRF" in response.content
    assert (Sandbox.objects.count(), ApiKey.objects.count(), Membership.objects.count()) == before
    assert client.get("/").status_code == 200  # still signed in (logout refused too)


def test_csrf_token_on_every_form(login, alice, team_a, fake_backend):
    client = login(alice)
    for url in ["/", "/keys/", "/team/"]:
        html = client.get(url).content.decode()
        forms = html.count('<form method="post"')
        assert forms and html.count("csrfmiddlewaretoken") >= forms, url
