"""File links: "copy link" gives a URL with a random token that downloads one file without a
session, expires, is revoked with its sandbox or on its own, and is audited on every use; the
sandbox page lists the working links with a Revoke button for those who may."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import NotFound, PermissionDenied
from sandboxes.contract.results import UploadFile
from sandboxes.models import AccessLink
from tenants.models import AuditLog, Membership
from tests.web.helpers import read_stream

pytestmark = pytest.mark.django_db

CONTENT = bytes(range(256)) * 40  # binary: nothing may be decoded or re-encoded on the way


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    info = services.create_sandbox(as_alice)
    services.upload_files(as_alice, info.id, [UploadFile(path="out/data.bin", content=CONTENT)])
    return info.id


def make_link(client: Client, sandbox_id: str, path: str = "/workspace/out/data.bin") -> str:
    """Press "Copy link" (the htmx POST) and read the URL from input.file-link."""
    response = client.post(
        f"/sandboxes/{sandbox_id}/files/link/", {"path": path}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200, response.content
    found = re.search(r'<input class="file-link"[^>]* value="([^"]+)"', response.content.decode())
    assert found, response.content
    return found.group(1)


def path_of(url: str) -> str:
    assert url.startswith("http://testserver/links/")
    return url.removeprefix("http://testserver")


def opens(action: str = "files.link.open", outcome: str = "ok"):
    return AuditLog.objects.filter(action=action, outcome=outcome)


def test_the_copy_link_button_is_on_file_rows(login, alice, sandbox):
    page = login(alice).get(f"/sandboxes/{sandbox}/?path=/workspace/out").content.decode()
    row = re.search(
        r'<tr class="file-row" data-path="/workspace/out/data.bin">(.*?)</tr>', page, re.S
    )
    assert row, page
    assert 'class="download"' in row.group(1) and "copy-link" in row.group(1)


def test_a_link_downloads_the_file_without_a_session(login, alice, sandbox, team_a):
    url = make_link(login(alice), sandbox)
    stranger = Client()  # no session at all
    response = stranger.get(path_of(url))
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="data.bin"'
    assert response["Cache-Control"] == "private, no-store"
    assert read_stream(response) == CONTENT
    assert "sessionid" not in response.cookies
    row = opens().get()
    assert row.actor is None and row.team == team_a and row.channel == "web"
    assert row.target_id == sandbox and row.details["path"] == "/workspace/out/data.bin"
    assert row.details["created_by"] == "alice" and row.details["link_id"]
    created = AuditLog.objects.get(action="files.link.create")
    assert created.actor == alice and created.details["link_id"] == row.details["link_id"]
    # One row per use: the download itself leaves no second row.
    assert not AuditLog.objects.filter(action="files.stream").exists()


def test_every_use_is_audited(login, alice, sandbox):
    url = path_of(make_link(login(alice), sandbox))
    for _ in range(3):
        assert read_stream(Client().get(url)) == CONTENT
    assert opens().count() == 3
    assert len({row.details["link_id"] for row in opens()}) == 1


def test_an_expired_link_is_not_found(login, alice, sandbox, settings):
    url = path_of(make_link(login(alice), sandbox))
    assert Client().get(url).status_code == 200
    AccessLink.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = Client().get(url)
    assert response.status_code == 404
    assert b"invalid or has expired" in response.content and CONTENT[:64] not in response.content
    assert opens(outcome="not_found").count() == 1
    # Its expiry is the one it was made with: a longer setting is for new links.
    settings.SANDHUB_FILE_LINK_SECONDS = 3 * 3600
    assert Client().get(url).status_code == 404


def test_a_changed_or_misused_token_is_not_found(login, alice, sandbox, as_alice):
    url = path_of(make_link(login(alice), sandbox))
    token = url.removeprefix("/links/").rstrip("/")
    assert Client().get(url).status_code == 200
    preview = services.get_preview_url(as_alice, sandbox, 8000).token  # another kind's token
    last = "A" if token[-1] != "A" else "B"
    for wrong in [token[:-1] + last, token[:-1], token + "A", "shp_" + token[4:], preview]:
        response = Client().get(f"/links/{wrong}/")
        assert response.status_code == 404, wrong
        assert b"This link does not work" in response.content


def test_garbage_is_not_found(client, fake_backend):
    for token in ["x", "a:b:c", "." * 300, "%00"]:
        assert client.get(f"/links/{token}/").status_code == 404


def test_deleting_the_sandbox_revokes_its_links(login, alice, sandbox, as_alice):
    url = path_of(make_link(login(alice), sandbox))
    assert Client().get(url).status_code == 200
    services.delete_sandbox(as_alice, sandbox)
    response = Client().get(url)
    assert response.status_code == 404
    assert opens(outcome="not_found").count() == 1


def test_a_creator_who_left_the_team_takes_his_links_with_him(login, mallory, sandbox):
    url = path_of(make_link(login(mallory), sandbox))
    Membership.objects.filter(user=mallory).delete()
    assert Client().get(url).status_code == 404


def test_a_viewer_may_not_make_links(login, victor, sandbox, as_victor):
    client = login(victor)
    page = client.get(f"/sandboxes/{sandbox}/?path=/workspace/out").content.decode()
    assert "copy-link" not in page
    response = client.post(f"/sandboxes/{sandbox}/files/link/", {"path": "out/data.bin"})
    assert response.status_code == 403 and b"viewer may not" in response.content
    assert b"file-link" not in response.content.replace(b"link-error", b"")
    with pytest.raises(PermissionDenied):
        services.create_file_link(as_victor, sandbox, "/workspace/out/data.bin")


def test_another_team_cannot_make_links(login, bob, sandbox, as_bob):
    response = login(bob).post(f"/sandboxes/{sandbox}/files/link/", {"path": "out/data.bin"})
    assert response.status_code == 404
    with pytest.raises(NotFound):
        services.create_file_link(as_bob, sandbox, "/workspace/out/data.bin")


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("/workspace/out", 400, b"not a regular file"),
        ("/workspace/nope.txt", 404, b"not found"),
        ("", 400, b"non-empty"),
    ],
)
def test_only_an_existing_file_gets_a_link(login, alice, sandbox, path, status, message):
    response = login(alice).post(f"/sandboxes/{sandbox}/files/link/", {"path": path})
    assert response.status_code == status
    assert message in response.content and b'class="file-link"' not in response.content
    assert not AuditLog.objects.filter(action="files.link.create", outcome="ok").exists()


def test_making_a_link_needs_the_csrf_token(login, alice, sandbox):
    client = login(alice, csrf=True)
    response = client.post(f"/sandboxes/{sandbox}/files/link/", {"path": "out/data.bin"})
    assert response.status_code == 403
    assert not AuditLog.objects.filter(action="files.link.create").exists()


def test_the_link_lives_as_long_as_the_setting_says(sandbox, settings, as_alice):
    settings.SANDHUB_FILE_LINK_SECONDS = 600
    link = services.create_file_link(as_alice, sandbox, "out/data.bin")
    left = (link.expires_at - timezone.now()).total_seconds()
    assert 590 < left <= 600


# --- the "Links" section: listed, revoked one by one -----------------------------------------


def links_section(client: Client, sandbox_id: str) -> str:
    page = client.get(f"/sandboxes/{sandbox_id}/").content.decode()
    found = re.search(r'<section class="card" id="links".*?</section>', page, re.S)
    assert found, page
    return found.group(0)


def row_of(section: str, link_id: str) -> str:
    found = re.search(rf'<tr class="link-row" data-link-id="{link_id}".*?</tr>', section, re.S)
    assert found, section
    return found.group(0)


def revoke_url(sandbox_id: str, link_id: str) -> str:
    return f"/sandboxes/{sandbox_id}/links/{link_id}/revoke/"


def link_id_of(url: str) -> str:
    token = url.rstrip("/").rsplit("/", 1)[1]
    return AccessLink.objects.get(secret_hash=hashlib.sha256(token.encode()).hexdigest()).public_id


def test_the_page_lists_working_links_with_revoke_for_those_who_may(
    login, alice, mallory, victor, sandbox, as_alice
):
    owners = link_id_of(make_link(login(alice), sandbox))
    members = link_id_of(make_link(login(mallory), sandbox))
    preview = services.get_preview_url(as_alice, sandbox, 8000, expires_seconds=900).link_id
    shown = links_section(login(alice), sandbox)
    for link_id in (owners, members, preview):
        assert 'link-revoke"' in row_of(shown, link_id)
    assert "/workspace/out/data.bin" in row_of(shown, owners) and "mallory" in row_of(
        shown, members
    )
    assert "8000" in row_of(shown, preview) and 'data-kind="preview"' in row_of(shown, preview)
    assert 'data-confirm="Revoke this' in shown
    assert not re.search(r"\son[a-z]+=|<script", shown), "no inline script: the page has a CSP"
    as_member = links_section(login(mallory), sandbox)
    assert 'link-revoke"' in row_of(as_member, members)
    assert 'link-revoke"' not in row_of(as_member, owners)
    as_viewer = links_section(login(victor), sandbox)
    assert owners in as_viewer and "link-revoke" not in as_viewer


def test_one_link_revoked_on_the_page_while_another_keeps_working(login, alice, sandbox):
    client = login(alice)
    keep, cut = path_of(make_link(client, sandbox)), path_of(make_link(client, sandbox))
    response = client.post(revoke_url(sandbox, link_id_of(cut)), follow=True)
    assert response.redirect_chain[-1][0].endswith(f"/sandboxes/{sandbox}/#links")
    assert b"no longer works" in response.content
    assert Client().get(cut).status_code == 404
    assert read_stream(Client().get(keep)) == CONTENT
    shown = links_section(client, sandbox)
    assert link_id_of(keep) in shown and link_id_of(cut) not in shown
    row = AuditLog.objects.get(action="link.revoke")
    assert (row.actor, row.details["link_id"]) == (alice, link_id_of(cut))


def test_who_may_revoke_on_the_page(login, alice, mallory, victor, bob, sandbox):
    owners = link_id_of(make_link(login(alice), sandbox))
    url = revoke_url(sandbox, owners)
    assert login(bob).post(url).status_code == 404
    assert b"viewer may not" in login(victor).post(url).content
    refused = login(mallory).post(url)
    assert refused.status_code == 403 and b"creator or the team" in refused.content
    assert login(alice, csrf=True).post(url).status_code == 403  # no CSRF token
    assert login(alice).post(revoke_url(sandbox, "nonsense")).status_code == 400
    assert login(alice).post(revoke_url(sandbox, "lnk_0000ghost000")).status_code == 404
    assert login(alice).get(url).status_code == 405
    assert not AccessLink.objects.filter(revoked_at__isnull=False).exists()
