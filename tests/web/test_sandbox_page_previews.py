"""The "Previews" section of the sandbox page, through the Django test client on the in-memory
backend (a sandbox's port answers when tests/fakes.py's FakeBackend.ports or .apps maps it to
a real loopback listener): deploy, list, open, stop, a failed deploy's log in the page, the
"public" choice for owners only, the "Open" link in path and host mode, a viewer's read-only
section and refused POSTs, another team's 404, CSRF. The real engine and browser are in
test_browser_previews.py."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import cache

from sandboxes import services
from sandboxes.models import CommandExecution, Preview
from tests.fakes import FakeBackend
from tests.web.helpers import field_errors

pytestmark = pytest.mark.django_db


APP = "serve 8000; sleep 60"  # the fake's app: port 8000 answers while the job runs


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel's backlog does): an app."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


@pytest.fixture(autouse=True)
def ports(fake_backend, listener) -> None:
    """Port 8000 answers while a `serve 8000` job runs; port 3000 always answers."""
    FakeBackend.apps[8000] = listener
    FakeBackend.ports[3000] = listener
    cache.clear()


def open_previews(sandbox_id: str) -> list[Preview]:
    return list(Preview.objects.open().filter(sandbox__public_id=sandbox_id).order_by("port"))


def section(html: str) -> str:
    found = re.search(r'<section class="card" id="previews".*?</section>', html, re.S)
    assert found, "no previews section on the page"
    return found.group(0)


def deploy(client, sandbox_id: str, command: str = APP, port: int = 8000, **more: str):
    data = {"deploy-command": command, "deploy-port": str(port), **more}
    return client.post(f"/sandboxes/{sandbox_id}/previews/deploy/", data)


# --- writers ---------------------------------------------------------------------------------


def test_deploy_lists_opens_and_stops_an_app(login, sandbox, alice):
    client = login(alice)
    empty = section(client.get(f"/sandboxes/{sandbox}/").content.decode())
    assert "No open previews" in empty and 'id="deploy-form"' in empty
    response = deploy(client, sandbox)
    assert response.status_code == 302
    assert response["Location"] == f"/sandboxes/{sandbox}/#previews"
    (preview,) = open_previews(sandbox)
    job = CommandExecution.objects.get(background=True)
    assert (preview.port, preview.command_id, job.command) == (8000, job.id, APP)

    html = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert f"answers on port 8000 (background command #{job.id})" in html
    listed = section(html)
    assert 'data-port="8000"' in listed
    # Path mode: the preview's own address, the session goes along.
    assert f'href="http://testserver/preview/{sandbox}/8000/"' in listed
    assert f'href="/sandboxes/{sandbox}/jobs/{job.id}/"' in listed and "running" in listed
    assert f'action="/sandboxes/{sandbox}/previews/8000/stop/"' in listed

    stopped = client.post(f"/sandboxes/{sandbox}/previews/8000/stop/")
    assert stopped.status_code == 302 and stopped["Location"].endswith("#previews")
    assert open_previews(sandbox) == []
    job.refresh_from_db()
    assert job.status == "cancelled"
    after = client.get(f"/sandboxes/{sandbox}/").content.decode()
    assert f"port 8000 and its app (#{job.id}) was stopped" in after
    assert "No open previews" in section(after)
    # Stopping it again: nothing is open there.
    assert client.post(f"/sandboxes/{sandbox}/previews/8000/stop/").status_code == 404


def test_a_failed_deploy_shows_the_apps_log_and_leaves_no_preview(login, sandbox, alice):
    command = "echo listening soon; echo Traceback: port taken; exit 3"
    response = deploy(login(alice), sandbox, command, **{"deploy-wait_seconds": "5"})
    assert response.status_code == 422
    html = section(response.content.decode())
    error = re.search(
        r'<pre class="output deploy-error" id="deploy-error"[^>]*>(.*?)</pre>', html, re.S
    )
    assert error, html
    assert "the app ended (failed, exit code 3)" in error.group(1)
    assert "Traceback: port taken" in error.group(1)  # the end of its log
    assert "Traceback: port taken" in html.split('id="deploy-form"', 1)[1]  # in the form
    assert "listening soon" in html  # the command typed is kept
    assert open_previews(sandbox) == []
    assert CommandExecution.objects.get(background=True).status in ("failed", "cancelled")


def test_open_a_port_of_a_running_server(login, sandbox, alice):
    client = login(alice)
    response = client.post(f"/sandboxes/{sandbox}/previews/new/", {"preview-port": "3000"})
    assert response.status_code == 302
    (preview,) = open_previews(sandbox)
    assert (preview.port, preview.public, preview.command_id) == (3000, False, None)
    listed = section(client.get(f"/sandboxes/{sandbox}/").content.decode())
    assert 'data-port="3000"' in listed and 'class="preview-job"' not in listed
    # Opening it again takes the open one.
    client.post(f"/sandboxes/{sandbox}/previews/new/", {"preview-port": "3000"})
    assert len(open_previews(sandbox)) == 1


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "preview-port"),
        ({"preview-port": "0"}, "preview-port"),
        ({"preview-port": "70000"}, "preview-port"),
        ({"preview-port": "22"}, "preview-port"),  # not among the team's ports (a 403)
    ],
)
def test_opening_a_bad_port_opens_nothing(login, sandbox, alice, team_a, data, field):
    team_a.allowed_preview_ports = "1024-65535"
    team_a.save()
    response = login(alice).post(f"/sandboxes/{sandbox}/previews/new/", data)
    assert response.status_code in (400, 403)
    assert field_errors(response.content.decode(), field)
    assert open_previews(sandbox) == []


@pytest.mark.parametrize(
    "data",
    [
        {"deploy-command": " ", "deploy-port": "8000"},
        {"deploy-command": APP},
        {"deploy-command": APP, "deploy-port": "8000", "deploy-wait_seconds": "0"},
        {"deploy-command": APP, "deploy-port": "8000", "deploy-wait_seconds": "100000"},
    ],
)
def test_deploy_with_bad_input_starts_nothing(login, sandbox, alice, data):
    response = login(alice).post(f"/sandboxes/{sandbox}/previews/deploy/", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert any(
        field_errors(html, f) for f in ("deploy-command", "deploy-port", "deploy-wait_seconds")
    )
    assert not CommandExecution.objects.exists() and open_previews(sandbox) == []


def test_public_is_offered_to_owners_when_the_team_allows_it(
    login, sandbox, alice, mallory, team_a
):
    def form_of(user) -> str:
        return section(login(user).get(f"/sandboxes/{sandbox}/").content.decode())

    assert 'name="preview-public"' not in form_of(alice)  # the team does not allow it
    team_a.allow_public_previews = True
    team_a.save()
    assert 'name="preview-public"' in form_of(alice)
    assert 'name="preview-public"' not in form_of(mallory)  # a member: never
    # A member's "public" is not even read: the preview opens for the team only.
    login(mallory).post(
        f"/sandboxes/{sandbox}/previews/new/", {"preview-port": "3000", "preview-public": "on"}
    )
    assert open_previews(sandbox)[0].public is False
    login(alice).post(
        f"/sandboxes/{sandbox}/previews/new/", {"preview-port": "3000", "preview-public": "on"}
    )
    assert open_previews(sandbox)[0].public is True
    listed = form_of(alice)
    assert 'class="preview-public"' in listed
    # Unticked by an owner: back to the team only.
    login(alice).post(f"/sandboxes/{sandbox}/previews/new/", {"preview-port": "3000"})
    assert open_previews(sandbox)[0].public is False


# --- the "Open" link -------------------------------------------------------------------------


def test_open_in_host_mode_carries_a_fresh_token(login, sandbox, alice, as_alice, settings):
    settings.SANDHUB_PREVIEW_DOMAIN = "preview.localhost"
    services.get_preview_url(as_alice, sandbox, 3000)
    client = login(alice)
    listed = section(client.get(f"/sandboxes/{sandbox}/").content.decode())
    assert f'href="/sandboxes/{sandbox}/previews/3000/open/"' in listed
    response = client.get(f"/sandboxes/{sandbox}/previews/3000/open/")
    assert response.status_code == 302
    assert response["Cache-Control"] == "private, no-store"
    where = urlsplit(response["Location"])
    label = f"3000-{sandbox.replace('_', '-')}"
    assert (where.scheme, where.netloc, where.path) == ("http", f"{label}.preview.localhost", "/")
    (token,) = parse_qs(where.query)[services.PREVIEW_TOKEN_PARAM]
    request = services.PreviewRequest(sandbox, 3000, None, None, token, "10.0.0.9")
    grant = services.authorize_preview(request)  # a stranger's browser with the token: let in
    assert grant.via == "token" and grant.preview_id == open_previews(sandbox)[0].pk
    # No open preview on a port: nothing is opened by a GET.
    assert client.get(f"/sandboxes/{sandbox}/previews/3001/open/").status_code == 404
    assert len(open_previews(sandbox)) == 1


def test_open_in_path_mode_goes_to_the_preview_without_a_token(
    login, sandbox, alice, as_alice, settings
):
    settings.SANDHUB_PREVIEW_DOMAIN = ""
    services.get_preview_url(as_alice, sandbox, 3000)
    response = login(alice).get(f"/sandboxes/{sandbox}/previews/3000/open/")
    assert response.status_code == 302
    assert response["Location"] == f"http://testserver/preview/{sandbox}/3000/"


def test_a_public_preview_links_to_itself_in_host_mode(
    login, sandbox, alice, as_alice, team_a, settings
):
    settings.SANDHUB_PREVIEW_DOMAIN = "preview.localhost"
    team_a.allow_public_previews = True
    team_a.save()
    services.get_preview_url(as_alice, sandbox, 3000, public=True)
    listed = section(login(alice).get(f"/sandboxes/{sandbox}/").content.decode())
    label = f"3000-{sandbox.replace('_', '-')}"
    assert f'href="http://{label}.preview.localhost/"' in listed


# --- who may do what -------------------------------------------------------------------------


def urls(sandbox_id: str) -> tuple[list[str], list[str]]:
    base = f"/sandboxes/{sandbox_id}/previews/"
    return [base + "3000/open/"], [base + "new/", base + "deploy/", base + "3000/stop/"]


def post_data() -> dict[str, str]:
    return {"preview-port": "3000", "deploy-command": APP, "deploy-port": "8000"}


def test_a_viewer_sees_the_previews_but_no_controls(login, sandbox, victor, as_alice):
    services.deploy_app(as_alice, sandbox, command=APP, port=8000)
    client = login(victor)
    listed = section(client.get(f"/sandboxes/{sandbox}/").content.decode())
    assert 'data-port="8000"' in listed and 'class="preview-open"' in listed
    assert f'href="http://testserver/preview/{sandbox}/8000/"' in listed
    for control in ("<form", "preview-stop", "deploy-form", "preview-form", "Deploy an app"):
        assert control not in listed, control
    assert client.get(f"/sandboxes/{sandbox}/previews/8000/open/").status_code == 302
    _, posts = urls(sandbox)
    for url in [*posts, f"/sandboxes/{sandbox}/previews/8000/stop/"]:
        assert client.post(url, post_data()).status_code == 403, url
    (preview,) = open_previews(sandbox)
    assert preview.port == 8000 and CommandExecution.objects.filter(background=True).count() == 1


def test_a_viewer_in_host_mode_opens_with_a_token(login, sandbox, victor, as_alice, settings):
    """His session does not reach a preview host: the Open view gives him a token for the
    preview already open (never one for a port without a preview)."""
    settings.SANDHUB_PREVIEW_DOMAIN = "preview.localhost"
    services.get_preview_url(as_alice, sandbox, 3000)
    client = login(victor)
    listed = section(client.get(f"/sandboxes/{sandbox}/").content.decode())
    assert 'data-port="3000"' in listed and 'class="preview-open"' in listed
    opened = client.get(f"/sandboxes/{sandbox}/previews/3000/open/")
    assert opened.status_code == 302 and "sandhub_token=" in opened["Location"]
    assert opened["Location"].startswith(
        f"http://3000-{sandbox.replace('_', '-')}.preview.localhost"
    )
    assert client.get(f"/sandboxes/{sandbox}/previews/3001/open/").status_code in (403, 404)


def test_another_teams_sandbox_is_not_found(login, sandbox, bob, as_alice):
    services.get_preview_url(as_alice, sandbox, 3000)
    client = login(bob)
    gets, posts = urls(sandbox)
    for url in gets:
        assert client.get(url).status_code == 404, url
    for url in posts:
        assert client.post(url, post_data()).status_code == 404, url
    assert len(open_previews(sandbox)) == 1 and not CommandExecution.objects.exists()


def test_anonymous_goes_to_login_and_posts_need_csrf(client, login, sandbox, alice):
    gets, posts = urls(sandbox)
    for url in [*gets, *posts]:
        response = client.post(url) if url in posts else client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    checked = login(alice, csrf=True)
    for url in posts:
        assert checked.post(url, post_data()).status_code == 403, url
    assert open_previews(sandbox) == [] and not CommandExecution.objects.exists()
