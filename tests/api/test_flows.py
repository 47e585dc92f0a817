"""The REST API under /api/v1/ on the real Docker engine: flows, session auth, the schema,
and a large download that streams (in-process and through uvicorn). Who may do what, audit
rows and bad input are in test_access.py."""

from __future__ import annotations

import hashlib
import tracemalloc

import httpx2 as httpx
import pytest
from django.core.management import call_command
from django.http import StreamingHttpResponse
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import AuditLog, Channel, Membership
from tests.api.helpers import API, client_for
from tests.live import CALC, TEST_CALC

pytestmark = pytest.mark.docker
BIG_BYTES = 20_000_000
MEMORY_CEILING = 8 * 1024 * 1024  # well under the 20 MB file


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

    # Each call: the row of its first change and the end that continues it, none of its
    # steps' own, whatever it does inside.
    rows = list(AuditLog.objects.filter(id__gt=start).order_by("id"))
    assert [(r.action, r.channel) for r in rows] == [
        ("command.tests", Channel.API),
        ("command.tests", Channel.API),
        ("command.once", Channel.API),
        ("command.once", Channel.API),
    ]
    assert [r.details.get("continues") for r in rows] == [None, rows[0].pk, None, rows[2].pk]


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
