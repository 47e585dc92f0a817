"""Home: the team's sandboxes, create (form errors beside their fields), delete, quotas."""

from __future__ import annotations

import pytest

from sandboxes import services
from sandboxes.models import Sandbox, SandboxStatus
from tests.web.helpers import field_errors

pytestmark = pytest.mark.django_db

GOOD = {
    "image": "python",
    "name": "web-made",
    "cpus": "1",
    "memory_mb": "512",
    "disk_mb": "256",
    "lifetime_minutes": "30",
}


def live_count(team) -> int:
    return Sandbox.objects.filter(team=team).live().count()


def test_home_lists_my_team_only(login, alice, as_alice, as_bob, bob, fake_backend):
    mine = services.create_sandbox(as_alice, name="alpha-one")
    theirs = services.create_sandbox(as_bob, name="beta-one")
    html = login(alice).get("/").content.decode()
    assert f'href="/sandboxes/{mine.id}/"' in html and "alpha-one" in html
    assert theirs.id not in html and "beta-one" not in html
    for column in ("Image", "Host", "Owner", "Last activity"):
        assert f"<th>{column}</th>" in html
    for column in ("Name", "Status", "Age", "Expires"):  # headers that sort the list
        assert 'class="sort-link"' in html and f">{column}<span" in html
    row = html[html.index(f'data-sandbox-id="{mine.id}"') :]
    assert "status-running" in row[:600] and "local" in row[:900]
    assert "<time datetime=" in row  # shown in the reader's timezone by app.js


def test_home_quotas_and_form(login, alice, as_alice, team_a, fake_backend):
    services.create_sandbox(as_alice, cpus=1.5, memory_mb=512, disk_mb=100)
    html = login(alice).get("/").content.decode()
    assert "1 of 3" in html  # running sandboxes against team A's limit
    assert "1.5 (at most 2 per sandbox)" in html and "512 MB" in html
    assert 'role="meter"' in html
    assert 'id="create-form"' in html and 'name="cpus"' in html and 'max="2.0"' in html
    # Team A may not give network access: no control for it.
    assert 'name="network"' not in html
    team_a.allow_network = True
    team_a.save()
    assert 'name="network"' in login(alice).get("/").content.decode()


def test_empty_state_says_what_to_do(login, alice, victor, fake_backend):
    html = login(alice).get("/").content.decode()
    assert "No sandboxes yet" in html and "Create one with the form below" in html
    assert "No sandboxes yet" in login(victor).get("/").content.decode()


def test_create(login, alice, team_a, fake_backend):
    response = login(alice).post("/sandboxes/create/", GOOD)
    assert response.status_code == 302 and response["Location"] == "/"
    sandbox = Sandbox.objects.get(team=team_a)
    assert (sandbox.name, sandbox.cpus, sandbox.memory_mb, sandbox.disk_mb) == (
        "web-made",
        1.0,
        512,
        256,
    )
    assert sandbox.status == SandboxStatus.RUNNING and sandbox.network is False
    assert sandbox.owner == alice
    assert "web-made" in login(alice).get("/").content.decode()


def test_create_with_network_where_allowed(login, alice, team_a, fake_backend):
    team_a.allow_network = True
    team_a.save()
    login(alice).post("/sandboxes/create/", {**GOOD, "network": "public"})
    assert Sandbox.objects.get(team=team_a).network is True


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("cpus", "3", "limit is 2"),
        ("cpus", "0", "greater than or equal to 0.1"),
        ("cpus", "many", "Enter a number"),
        ("memory_mb", "999999", "limit is 2048"),
        ("memory_mb", "", "This field is required"),
        ("disk_mb", "10", "greater than or equal to 64"),
        ("lifetime_minutes", "100000", "limit is 1440"),
        ("image", "nope", "Select a valid choice"),
        ("name", "x" * 101, "at most 100 characters"),
    ],
)
def test_create_bad_input_errors_beside_the_field(
    login, alice, team_a, fake_backend, field, value, message
):
    response = login(alice).post("/sandboxes/create/", {**GOOD, field: value})
    assert response.status_code == 400
    errors = field_errors(response.content.decode(), field)
    assert any(message in e for e in errors), errors
    assert not Sandbox.objects.exists()


def test_create_refused_by_the_service_shows_why(login, alice, as_alice, team_a, fake_backend):
    for _ in range(3):
        services.create_sandbox(as_alice)
    response = login(alice).post("/sandboxes/create/", GOOD)
    assert response.status_code == 409
    assert "at most 3 running sandboxes" in response.content.decode()
    assert live_count(team_a) == 3


def test_bad_name_from_the_service_beside_the_name(login, alice, team_a, fake_backend):
    response = login(alice).post("/sandboxes/create/", {**GOOD, "name": "bad\x00name"})
    assert response.status_code in (400, 409)
    assert not Sandbox.objects.exists()


def test_viewer_sees_no_write_controls_and_is_refused(
    login, victor, as_alice, team_a, fake_backend
):
    info = services.create_sandbox(as_alice, name="kept")
    client = login(victor)
    html = client.get("/").content.decode()
    assert "kept" in html
    assert 'id="create-form"' not in html and "delete-sandbox" not in html
    response = client.post("/sandboxes/create/", GOOD)
    assert response.status_code == 403
    assert "a viewer may not create sandboxes" in response.content.decode()
    assert live_count(team_a) == 1
    response = client.post(f"/sandboxes/{info.id}/delete/")
    assert response.status_code == 403
    assert "a viewer may not delete sandboxes" in response.content.decode()
    assert Sandbox.objects.get(public_id=info.id).status == SandboxStatus.RUNNING


def test_delete(login, alice, as_alice, fake_backend):
    info = services.create_sandbox(as_alice, name="doomed")
    client = login(alice)
    assert 'class="danger small delete-sandbox"' in client.get("/").content.decode()
    response = client.post(f"/sandboxes/{info.id}/delete/")
    assert response.status_code == 302
    assert Sandbox.objects.get(public_id=info.id).status == SandboxStatus.DELETED
    page = client.get("/").content.decode()
    assert "was deleted" in page and info.id not in page.split("messages")[-1].split("</ul>")[-1]


def test_delete_is_post_only(login, alice, as_alice, fake_backend):
    info = services.create_sandbox(as_alice)
    assert login(alice).get(f"/sandboxes/{info.id}/delete/").status_code == 405
    assert Sandbox.objects.get(public_id=info.id).status == SandboxStatus.RUNNING


def test_another_teams_sandbox_is_not_found(login, alice, as_bob, fake_backend):
    theirs = services.create_sandbox(as_bob)
    response = login(alice).post(f"/sandboxes/{theirs.id}/delete/")
    assert response.status_code == 404
    assert f"sandbox {theirs.id} not found" in response.content.decode()
    assert Sandbox.objects.get(public_id=theirs.id).status == SandboxStatus.RUNNING
    malformed = login(alice).post("/sandboxes/nonsense/delete/")
    assert malformed.status_code == 400


def test_create_and_list_are_audited_on_the_web_channel(login, alice, team_a, fake_backend):
    from tenants.models import AuditLog

    login(alice).post("/sandboxes/create/", GOOD)
    row = AuditLog.objects.get(action="sandbox.create")
    assert (row.channel, row.actor, row.team, row.outcome) == ("web", alice, team_a, "ok")
    assert row.source_address == "127.0.0.1"
