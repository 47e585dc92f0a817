"""The REST endpoints of links (sandboxes/api/links.py): make a file link, list a sandbox's
links, revoke one while the others keep working; who may; a viewer's short preview tokens.
In-process API clients with real keys, on the in-memory backend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.contract.results import UploadFile
from tenants import apikeys
from tenants.models import AuditLog
from tests.api.helpers import API
from tests.web.helpers import read_stream

pytestmark = pytest.mark.django_db

CONTENT = b"numbers,1,2,3\n"


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    info = services.create_sandbox(as_alice, name="shared")
    services.upload_files(as_alice, info.id, [UploadFile(path="out.csv", content=CONTENT)])
    return info.id


@pytest.fixture
def clients(alice, victor, mallory, bob, team_a, team_b):
    def client(user, team, scopes="read,write") -> APIClient:
        made = apikeys.create_key(user, team, name="test", scopes=scopes)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {made.plaintext}")
        return api

    return {
        "alice": client(alice, team_a),
        "alice_read": client(alice, team_a, "read"),
        "mallory": client(mallory, team_a),
        "victor": client(victor, team_a),
        "bob": client(bob, team_b),
    }


def make(api: APIClient, sandbox: str, path: str = "out.csv"):
    return api.post(f"{API}/sandboxes/{sandbox}/links/", {"path": path}, format="json")


def download(url: str):
    assert url.startswith("http://testserver/links/shl_"), url
    return Client().get(url.removeprefix("http://testserver"))  # no session, no key


def test_a_file_link_made_over_rest_downloads_without_credentials(sandbox, clients, team_a):
    answer = make(clients["alice"], sandbox)
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert set(body) == {"url", "link_id", "sandbox_id", "path", "expires_at"}
    assert body["path"] == "/workspace/out.csv" and body["link_id"].startswith("lnk_")
    response = download(body["url"])
    assert response.status_code == 200 and read_stream(response) == CONTENT
    opened = AuditLog.objects.get(action="files.link.open")
    assert opened.details["link_id"] == body["link_id"] and opened.team == team_a
    assert opened.actor is None


def test_one_link_revoked_over_rest_while_another_keeps_working(sandbox, clients):
    alice = clients["alice"]
    keep, cut = make(alice, sandbox).json(), make(alice, sandbox).json()
    revoked = alice.delete(f"{API}/sandboxes/{sandbox}/links/{cut['link_id']}/")
    assert revoked.status_code == 200, revoked.content
    assert revoked.json()["revoked_at"] and revoked.json()["revoked_by"] == "alice"
    assert download(cut["url"]).status_code == 404
    assert download(keep["url"]).status_code == 200
    listed = alice.get(f"{API}/sandboxes/{sandbox}/links/").json()["results"]
    assert [link["id"] for link in listed] == [keep["link_id"]]
    (shown,) = listed
    assert (shown["kind"], shown["path"], shown["created_by"]) == ("file", keep["path"], "alice")
    assert "token" not in shown and "secret_hash" not in shown


def test_preview_tokens_are_listed_and_revoked_like_file_links(sandbox, clients):
    alice, base = clients["alice"], f"{API}/sandboxes/{sandbox}"
    opened = alice.post(f"{base}/previews/", {"port": 8000}, format="json")
    assert opened.status_code == 201, opened.content
    link_id = opened.json()["link_id"]
    (listed,) = alice.get(f"{base}/links/").json()["results"]
    assert (listed["id"], listed["kind"], listed["port"]) == (link_id, "preview", 8000)
    assert alice.delete(f"{base}/links/{link_id}/").status_code == 200
    assert alice.get(f"{base}/links/").json()["results"] == []


def test_a_viewer_gets_a_short_preview_token_and_no_long_one(sandbox, clients):
    base = f"{API}/sandboxes/{sandbox}/previews/"
    assert clients["alice"].post(base, {"port": 8000}, format="json").status_code == 201
    week = {"port": 8000, "expires_seconds": 7 * 24 * 3600}
    refused = clients["victor"].post(base, week, format="json")
    assert refused.status_code == 403 and "at most 600 s" in refused.json()["detail"]
    short = clients["victor"].post(base, {"port": 8000}, format="json")
    assert short.status_code == 201, short.content
    left = timezone.datetime.fromisoformat(short.json()["expires_at"]) - timezone.now()
    assert timedelta(seconds=590) < left <= timedelta(seconds=600)


def test_who_may_make_see_and_revoke_links(sandbox, clients):
    base = f"{API}/sandboxes/{sandbox}/links/"
    owners = make(clients["alice"], sandbox).json()["link_id"]
    for name, reason in [("victor", "a viewer may not"), ("alice_read", "no write scope")]:
        made = make(clients[name], sandbox)
        assert made.status_code == 403 and reason in made.json()["detail"], made.content
        revoked = clients[name].delete(f"{base}{owners}/")
        assert revoked.status_code == 403 and reason in revoked.json()["detail"]
        assert clients[name].get(base).status_code == 200  # seeing them is reading
    member = clients["mallory"].delete(f"{base}{owners}/")
    assert member.status_code == 403 and "creator or the team's owners" in member.json()["detail"]
    for answer in [
        make(clients["bob"], sandbox),
        clients["bob"].get(base),
        clients["bob"].delete(f"{base}{owners}/"),
    ]:
        assert answer.status_code == 404
        assert answer.json()["detail"] == f"sandbox {sandbox} not found"
    ghost = clients["alice"].delete(f"{base}lnk_0000ghost000/")
    assert ghost.status_code == 404 and "link lnk_0000ghost000 not found" in ghost.json()["detail"]
    assert clients["alice"].delete(f"{base}nonsense/").status_code == 400
    bodies = [{}, {"path": ""}, {"path": "out.csv", "x": 1}, {"path": "/workspace"}]
    for body in [*bodies, {"path": "0" * 4096}, {"path": "a/" + "é" * 128}]:
        answer = clients["alice"].post(base, body, format="json")
        assert answer.status_code == 400, (body, answer.content)
    assert len(clients["alice"].get(base).json()["results"]) == 1


def test_schema_documents_the_endpoints():
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    paths = schema["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/sandboxes/{sandbox_id}/links/"])
    revoke = paths["/api/v1/sandboxes/{sandbox_id}/links/{link_id}/"]
    assert set(revoke) >= {"delete"} and "get" not in revoke
    made = paths["/api/v1/sandboxes/{sandbox_id}/links/"]["post"]["responses"]["201"]
    assert made["content"]["application/json"]["schema"]["$ref"].endswith("/FileLink")
