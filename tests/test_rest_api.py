"""The REST API under /api/v1/ on the real Docker engine: flows, refusals, limits, the schema,
and a large download that streams (in-process and through uvicorn)."""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import httpx2 as httpx
import pytest
from django.core.management import call_command
from django.http import StreamingHttpResponse
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog, Channel, Membership
from tests import mcp_fixtures as fx
from tests.mcp_fixtures import CALC, TEST_CALC

asgi_server, live_db, shared_sandbox, world = (
    fx.asgi_server,
    fx.live_db,
    fx.shared_sandbox,
    fx.world,
)

pytestmark = pytest.mark.docker
API = "/api/v1"
BIG_BYTES = 20_000_000
MEMORY_CEILING = 8 * 1024 * 1024  # well under the 20 MB file


def client_for(world, key_name: str | None) -> APIClient:
    client = APIClient()
    if key_name:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys[key_name]}")
    return client


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


def test_flow_create_upload_list_run_history_download_delete(world):
    client = client_for(world, "alice")
    created = client.post(f"{API}/sandboxes/", {"name": "rest flow"}, format="json")
    assert created.status_code == 201, created.content
    sandbox_id = created.json()["id"]
    assert created.json()["status"] == "running"
    base = f"{API}/sandboxes/{sandbox_id}"
    try:
        multipart = client.post(
            f"{base}/files/",
            {
                "path": "proj",
                "file": [_upload("calc.py", CALC.encode()), _upload("notes.txt", b"hi\n")],
            },
            format="multipart",
        )
        assert multipart.status_code == 201, multipart.content
        assert multipart.json()["paths"] == ["/workspace/proj/calc.py", "/workspace/proj/notes.txt"]
        raw = client.post(
            f"{base}/files/?path=proj/blob.bin",
            data=b"\x00\x01\xfe\xff",
            content_type="application/octet-stream",
        )
        assert raw.status_code == 201 and raw.json()["total_bytes"] == 4

        listing = client.get(f"{base}/files/", {"path": "proj"}).json()
        assert {e["name"] for e in listing["results"]} == {"calc.py", "notes.txt", "blob.bin"}

        ran = client.post(
            f"{base}/commands/", {"command": "cat proj/notes.txt; exit 3"}, format="json"
        )
        assert ran.status_code == 201
        assert (ran.json()["stdout"], ran.json()["exit_code"]) == ("hi\n", 3)
        assert ran.json()["status"] == "failed" and ran.json()["channel"] == "api"
        client.post(f"{base}/commands/", {"command": "true"}, format="json")

        history = client.get(f"{base}/commands/", {"limit": 1}).json()
        assert history["count"] == 2 and history["next"] and len(history["results"]) == 1
        detail = client.get(f"{API}/commands/{ran.json()['id']}/").json()
        assert detail["command"] == "cat proj/notes.txt; exit 3"

        download = client.get(f"{base}/files/download", {"path": "proj/blob.bin"})
        assert download.status_code == 200 and isinstance(download, StreamingHttpResponse)
        assert b"".join(download.streaming_content) == b"\x00\x01\xfe\xff"
        assert 'filename="blob.bin"' in download["Content-Disposition"]

        hosts = client.get(f"{API}/hosts/").json()["results"]
        assert hosts[0]["name"] == "local" and 0 <= hosts[0]["idle_score"] <= 1
        listed = client.get(f"{API}/sandboxes/").json()
        assert sandbox_id in {s["id"] for s in listed["results"]}
    finally:
        deleted = client.delete(f"{base}/")
    assert deleted.status_code == 200 and deleted.json()["status"] == "deleted"
    assert client.get(f"{base}/").status_code == 404


def _upload(name: str, content: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, content)


def test_run_tests_and_run_once_endpoints(world, shared_sandbox):
    client = client_for(world, "alice")
    base = f"{API}/sandboxes/{shared_sandbox}"
    files = [("calc.py", CALC.encode()), ("test_calc.py", TEST_CALC.encode())]
    uploaded = client.post(
        f"{base}/files/",
        {"path": "rest_tests", "file": [_upload(name, data) for name, data in files]},
        format="multipart",
    )
    assert uploaded.status_code == 201, uploaded.content
    start = AuditLog.objects.order_by("-id").values_list("id", flat=True).first()

    tested = client.post(
        f"{base}/run-tests/",
        {"command": "python3 -m pytest -q -p no:cacheprovider", "cwd": "rest_tests"},
        format="json",
    )
    assert tested.status_code == 200, tested.content
    report = tested.json()
    assert report["report_found"] and (report["passed"], report["failed"]) == (2, 1)
    assert report["failures"][0]["name"] == "test_calc.test_add_wrong"
    assert "two and two make four" in report["failures"][0]["message"]
    assert report["result"]["status"] == "failed" and report["result"]["channel"] == "api"

    once = client.post(
        f"{API}/run-once/",
        {
            "command": "cat hello.txt && ./hi.sh",
            "files": [
                {"path": "hello.txt", "content": "hi there\n"},
                {"path": "hi.sh", "content": "#!/bin/sh\necho run\n", "executable": True},
            ],
        },
        format="json",
    )
    assert once.status_code == 200, once.content
    body = once.json()
    assert body["deleted"] and body["result"]["stdout"] == "hi there\nrun\n"
    assert Sandbox.objects.get(public_id=body["sandbox_id"]).status == "deleted"

    # One call, one audit row, whatever it does inside.
    rows = AuditLog.objects.filter(id__gt=start).order_by("id")
    assert [(r.action, r.channel) for r in rows] == [
        ("command.tests", Channel.API),
        ("command.once", Channel.API),
    ]


def test_session_auth_acts_in_the_users_team(world, shared_sandbox):
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(world.alice)
    listed = browser.get(f"{API}/sandboxes/")
    assert listed.status_code == 200
    assert shared_sandbox in {s["id"] for s in listed.json()["results"]}
    # A team the user is not in acts as no team at all.
    assert browser.get(f"{API}/sandboxes/", {"team": "beta"}).status_code == 403
    # Unsafe methods need the CSRF token with a session (not with an API key).
    refused = browser.post(
        f"{API}/sandboxes/{shared_sandbox}/commands/", {"command": "true"}, format="json"
    )
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    other = APIClient()
    other.force_login(world.bob)
    assert shared_sandbox not in {s["id"] for s in other.get(f"{API}/sandboxes/").json()["results"]}
    # Someone in two teams acts in the first one, or in the one named.
    second = Membership.objects.create(user=world.bob, team=world.team_a, role="viewer")
    try:
        ids = {s["id"] for s in other.get(f"{API}/sandboxes/").json()["results"]}
        assert shared_sandbox not in ids
        named = other.get(f"{API}/sandboxes/", {"team": "alpha"}).json()["results"]
        assert shared_sandbox in {s["id"] for s in named}
    finally:
        second.delete()


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


def test_schema_validates_and_docs_are_served_without_a_cdn(world, asgi_server, tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "s.yml"))
    schema = httpx.get(f"{asgi_server}/api/schema/", headers={"Accept": "application/json"})
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/sandboxes/{sandbox_id}/files/download" in paths
    assert schema.json()["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"

    docs = httpx.get(f"{asgi_server}/api/docs/")
    assert docs.status_code == 200
    assert "https://" not in docs.text.split("<body")[0] + "".join(
        line for line in docs.text.splitlines() if "src=" in line or "href=" in line
    )
    bundle = "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
    assert bundle in docs.text
    static = httpx.get(f"{asgi_server}{bundle}")
    assert static.status_code == 200 and len(static.content) > 100_000


@pytest.fixture(scope="module")
def big_file(world, shared_sandbox) -> str:
    made = services.run_command(
        world.principal(),
        shared_sandbox,
        f"head -c {BIG_BYTES} /dev/urandom > big.bin && sha256sum big.bin",
    )
    assert made.exit_code == 0, made.stderr
    return made.stdout.split()[0]


def test_a_20_mb_download_streams_in_process(world, shared_sandbox, big_file):
    client = client_for(world, "alice")
    tracemalloc.start()
    try:
        response = client.get(
            f"{API}/sandboxes/{shared_sandbox}/files/download", {"path": "big.bin"}
        )
        assert isinstance(response, StreamingHttpResponse) and response.streaming
        digest, size = hashlib.sha256(), 0
        for chunk in response.streaming_content:
            digest.update(chunk)
            size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (size, digest.hexdigest()) == (BIG_BYTES, big_file)
    assert peak < MEMORY_CEILING, f"peak {peak} bytes while streaming"


def test_a_20_mb_download_streams_through_uvicorn(world, shared_sandbox, big_file, asgi_server):
    url = f"{asgi_server}{API}/sandboxes/{shared_sandbox}/files/download"
    headers = {"Authorization": f"Bearer {world.keys['alice']}"}
    tracemalloc.start()
    try:
        digest, size, chunks = hashlib.sha256(), 0, 0
        with httpx.stream("GET", url, params={"path": "big.bin"}, headers=headers) as response:
            assert response.status_code == 200
            assert "content-length" not in response.headers  # streamed, not buffered
            for chunk in response.iter_bytes():
                digest.update(chunk)
                size += len(chunk)
                chunks += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (size, digest.hexdigest()) == (BIG_BYTES, big_file)
    assert chunks > 10
    # The server runs in this process: its memory is counted too.
    assert peak < MEMORY_CEILING, f"peak {peak} bytes while streaming"
