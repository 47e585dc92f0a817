"""Who may do what through the REST API under /api/v1/, and what bad input does: keys
(missing, wrong, expired, revoked, read-only, a viewer's, a removed member's), another team's
sandboxes on every endpoint, an audit row for every call, clear errors that change nothing.
The real Docker engine behind the services; flows and downloads are in test_flows.py."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog, Channel, Membership
from tests.api.helpers import API, client_for

pytestmark = pytest.mark.docker


def counts() -> tuple[int, int]:
    return Sandbox.objects.count(), CommandExecution.objects.count()


def endpoints(sandbox_id: str, command_id: int) -> list[tuple[str, str, dict]]:
    """Every endpoint that names a sandbox or a command, with a plausible request."""
    base = f"{API}/sandboxes/{sandbox_id}"
    return [
        ("get", f"{base}/", {}),
        ("delete", f"{base}/", {}),
        ("get", f"{base}/commands/", {}),
        ("post", f"{base}/commands/", {"data": {"command": "true"}, "format": "json"}),
        ("get", f"{base}/files/", {}),
        (
            "post",
            f"{base}/files/?path=x.txt",
            {"data": b"x", "content_type": "application/octet-stream"},
        ),
        ("get", f"{base}/files/download?path=/etc/hostname", {}),
        ("get", f"{API}/commands/{command_id}/", {}),
    ]


@pytest.mark.parametrize("key_name", [None, "wrong", "expired", "revoked"])
def test_missing_wrong_expired_and_revoked_keys_get_401(world, key_name):
    client = APIClient()
    if key_name == "wrong":
        client.credentials(HTTP_AUTHORIZATION="Bearer shk_aaaaaaaa_" + "q" * 43)
    elif key_name:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys[key_name]}")
    response = client.get(f"{API}/sandboxes/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_another_teams_sandbox_is_not_found_on_every_endpoint(world, shared_sandbox):
    command = services.run_command(world.principal(), shared_sandbox, "true")
    before = counts()
    client = client_for(world, "bob")
    for method, url, kwargs in endpoints(shared_sandbox, command.id):
        response = getattr(client, method)(url, **kwargs)
        assert response.status_code == 404, (method, url, response.content)
        assert "not found" in response.json()["detail"], (method, url)
    assert counts() == before
    assert Sandbox.objects.get(public_id=shared_sandbox).status == "running"


@pytest.mark.parametrize(
    "key_name, reason", [("alice_read", "no write scope"), ("victor", "a viewer may not")]
)
def test_read_scope_and_viewer_keys_are_refused_every_write(
    world, shared_sandbox, key_name, reason
):
    before = counts()
    client = client_for(world, key_name)
    writes = [
        ("post", f"{API}/sandboxes/", {"data": {}, "format": "json"}),
        *[(m, u, k) for m, u, k in endpoints(shared_sandbox, 1) if m in ("post", "delete")],
    ]
    for method, url, kwargs in writes:
        response = getattr(client, method)(url, **kwargs)
        assert response.status_code == 403, (method, url, response.content)
        assert reason in response.json()["detail"], (method, url, response.json())
    assert client.get(f"{API}/sandboxes/{shared_sandbox}/").status_code == 200
    assert counts() == before


def test_removing_the_membership_disables_the_key_at_once(world):
    client = client_for(world, "dave")
    assert client.get(f"{API}/hosts/").status_code == 200
    Membership.objects.filter(user=world.dave, team=world.team_a).delete()
    assert client.get(f"{API}/hosts/").status_code == 401


@pytest.mark.audit_views
def test_every_call_leaves_an_api_audit_row(world, shared_sandbox):
    client = client_for(world, "alice")
    base = f"{API}/sandboxes/{shared_sandbox}"
    start = AuditLog.objects.order_by("-id").values_list("id", flat=True).first()
    calls = [
        client.get(f"{API}/sandboxes/"),
        client.get(f"{base}/"),
        client.post(f"{base}/commands/", {"command": "echo audited > a.txt"}, format="json"),
        client.get(f"{base}/commands/"),
        client.get(f"{base}/files/"),
        client.post(
            f"{base}/files/?path=b.txt", data=b"b", content_type="application/octet-stream"
        ),
        client.get(f"{base}/files/download", {"path": "a.txt"}),
        client.get(f"{API}/hosts/"),
        client.get(f"{API}/sandboxes/sb_doesnotexist/"),
    ]
    assert [c.status_code for c in calls] == [200, 200, 201, 200, 200, 201, 200, 200, 404]
    rows = list(AuditLog.objects.filter(id__gt=start).order_by("id"))
    assert [r.action for r in rows] == [
        "sandbox.list",
        "sandbox.get",
        "command.run",
        "command.list",
        "files.list",
        "files.upload",
        "files.stream",
        "host.list",
        "sandbox.get",
    ]
    assert {(r.channel, r.actor_id, r.source_address) for r in rows} == {
        (Channel.API, world.alice.pk, "127.0.0.1")
    }
    assert rows[-1].outcome == "not_found"


def test_bad_input_gives_clear_errors_and_creates_nothing(world, shared_sandbox, settings):
    client = client_for(world, "alice")
    base = f"{API}/sandboxes/{shared_sandbox}"
    before = counts()
    cases = [
        ("post", f"{API}/sandboxes/", {"data": {"cpu": 1}, "format": "json"}, 400, "unknown field"),
        (
            "post",
            f"{API}/sandboxes/",
            {"data": {"cpus": "lots"}, "format": "json"},
            400,
            "A valid number is required",
        ),
        (
            "post",
            f"{API}/sandboxes/",
            {"data": {"memory_mb": 10**5}, "format": "json"},
            409,
            "team quota",
        ),
        (
            "post",
            f"{base}/commands/",
            {"data": {"command": ["ls"]}, "format": "json"},
            400,
            "Not a valid string",
        ),
        (
            "post",
            f"{base}/commands/",
            {"data": {"command": "true", "timeout": 10**7}, "format": "json"},
            400,
            "less than or equal",
        ),
        (
            "post",
            f"{base}/commands/",
            {"data": "{not json", "content_type": "application/json"},
            400,
            "JSON parse error",
        ),
        (
            "post",
            f"{base}/commands/",
            {
                "data": json.dumps({"command": "x" * (5 * 2**20)}),
                "content_type": "application/json",
            },
            413,
            "too large",
        ),
        (
            "post",
            f"{base}/files/",
            {"data": b"x", "content_type": "application/octet-stream"},
            400,
            "?path=",
        ),
        (
            "post",
            f"{base}/files/?path=../../etc/passwd",
            {"data": b"x", "content_type": "application/octet-stream"},
            400,
            "inside /workspace",
        ),
        ("get", f"{API}/sandboxes/not-an-id/", {}, 400, "malformed sandbox id"),
        ("get", f"{API}/sandboxes/sb_UPPER;rm/commands/", {}, 400, "malformed sandbox id"),
        ("get", f"{base}/files/download", {}, 400, "?path="),
        ("get", f"{base}/files/download?path=/workspace", {}, 400, "is a directory"),
        ("get", f"{base}/files/download?path=/nope", {}, 404, "not found"),
    ]
    for method, url, kwargs, status, text in cases:
        response = getattr(client, method)(url, **kwargs)
        assert response.status_code == status, (url, response.content[:300])
        assert text in json.dumps(response.json()), (url, response.json())

    settings.SANDHUB_MAX_TRANSFER_BYTES = 1024
    too_big = client.post(
        f"{base}/files/?path=big.bin", data=b"x" * 5000, content_type="application/octet-stream"
    )
    assert too_big.status_code == 413 and "1024 bytes" in too_big.json()["detail"]
    assert counts() == before
