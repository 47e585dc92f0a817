"""The REST endpoints of snapshots (sandboxes/api/snapshots.py): take one (POST with
sandbox_id and name), list, show, start a sandbox from it (POST /sandboxes/ with
snapshot_id), delete; who may; another team's is not found. In-process API clients with real
keys, on the in-memory backend."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.contract.results import UploadFile
from tenants import apikeys
from tests.api.helpers import API

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    fake_backend.snapshots = {}
    info = services.create_sandbox(as_alice, name="prepared", memory_mb=256)
    services.upload_files(as_alice, info.id, [UploadFile(path="deps.txt", content=b"six\n")])
    return info.id


@pytest.fixture
def clients(alice, victor, bob, team_a, team_b):
    def client(user, team, scopes="read,write") -> APIClient:
        made = apikeys.create_key(user, team, name="test", scopes=scopes)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {made.plaintext}")
        return api

    return {
        "alice": client(alice, team_a),
        "alice_read": client(alice, team_a, "read"),
        "victor": client(victor, team_a),
        "bob": client(bob, team_b),
    }


def test_take_list_start_from_and_delete(sandbox, clients, as_alice):
    alice = clients["alice"]
    taken = alice.post(f"{API}/snapshots/", {"sandbox_id": sandbox, "name": "deps"}, format="json")
    assert taken.status_code == 201, taken.content
    snap = taken.json()
    assert snap["id"].startswith("snap_") and snap["status"] == "ready"
    assert (snap["sandbox_id"], snap["memory_mb"], snap["host_kind"]) == (sandbox, 256, "docker")
    listed = clients["victor"].get(f"{API}/snapshots/").json()
    assert [s["id"] for s in listed["results"]] == [snap["id"]]
    assert clients["victor"].get(f"{API}/snapshots/{snap['id']}/").json()["name"] == "deps"

    made = alice.post(f"{API}/sandboxes/", {"snapshot_id": snap["id"]}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["memory_mb"] == 256
    read = services.read_file(as_alice, made.json()["id"], "deps.txt")
    assert read.content == b"six\n"

    gone = alice.delete(f"{API}/snapshots/{snap['id']}/")
    assert gone.status_code == 200 and gone.json()["status"] == "deleted"
    assert alice.get(f"{API}/snapshots/{snap['id']}/").status_code == 404


def test_who_may_and_another_teams(sandbox, clients):
    body = {"sandbox_id": sandbox, "name": "x"}
    for who, said in (("victor", "a viewer may not"), ("alice_read", "no write scope")):
        refused = clients[who].post(f"{API}/snapshots/", body, format="json")
        assert refused.status_code == 403 and said in refused.json()["detail"]
    snap = clients["alice"].post(f"{API}/snapshots/", body, format="json").json()
    bob = clients["bob"]
    for ident in (snap["id"], "snap_0000ghost000"):
        for answer in (
            bob.get(f"{API}/snapshots/{ident}/"),
            bob.delete(f"{API}/snapshots/{ident}/"),
            bob.post(f"{API}/sandboxes/", {"snapshot_id": ident}, format="json"),
        ):
            assert answer.status_code == 404
            assert answer.json() == {"detail": f"snapshot {ident} not found", "code": "not_found"}
    assert bob.get(f"{API}/snapshots/").json()["results"] == []
    bad = clients["alice"].post(f"{API}/snapshots/", {"sandbox_id": sandbox}, format="json")
    assert bad.status_code == 400 and "name" in bad.json()["fields"]
    unknown = clients["alice"].post(f"{API}/snapshots/", {**body, "x": 1}, format="json")
    assert unknown.status_code == 400
    over = clients["alice"].post(f"{API}/snapshots/", body, format="json")
    assert over.status_code == 409 and "already has a snapshot named 'x'" in over.json()["detail"]
