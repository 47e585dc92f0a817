"""Background commands through the REST API (in-process APIClient, real Docker engine):
start, check, cancel, refusals, input errors, audit rows and the OpenAPI schema.

No worker runs here: a check reads the sandbox live and records the end itself.
"""

from __future__ import annotations

import time

import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.models import CommandExecution
from tenants.models import AuditLog, Channel

pytestmark = pytest.mark.docker
API = "/api/v1"


def client_for(world, key_name: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys[key_name]}")
    return client


def last_audit_id() -> int:
    return AuditLog.objects.order_by("-id").values_list("id", flat=True).first() or 0


def audit_since(start: int) -> list[AuditLog]:
    return list(AuditLog.objects.filter(id__gt=start).order_by("id"))


def until_ended(client: APIClient, url: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(url)
        assert response.status_code == 200, response.content
        if not response.json()["running"]:
            return response.json()
        if time.monotonic() > deadline:
            raise AssertionError(f"still running after {timeout:g} s: {response.json()}")
        time.sleep(0.2)


@pytest.mark.audit_views
def test_start_check_finish_then_cancel_another(world, shared_sandbox):
    client = client_for(world, "alice")
    base = f"{API}/sandboxes/{shared_sandbox}/background/"
    script = "echo begin; sleep 2; echo end >&2; exit 3"
    start = last_audit_id()

    began = time.monotonic()
    started = client.post(
        base, {"command": script, "max_runtime_seconds": 60, "env": {"A": "1"}}, format="json"
    )
    assert time.monotonic() - began < 2
    assert started.status_code == 202, started.content
    body = started.json()
    assert (body["status"], body["background"], body["channel"]) == ("running", True, "api")
    assert (body["command"], body["exit_code"]) == (script, None)
    check_url = f"{base}{body['id']}/"
    assert started["Location"] == check_url

    running = client.get(check_url).json()
    assert running["running"] and running["status"] == "running"
    assert running["exit_code"] is None and running["elapsed_seconds"] < 2
    assert running["max_runtime_seconds"] == 60

    ended = until_ended(client, check_url)
    assert (ended["running"], ended["status"], ended["exit_code"]) == (False, "failed", 3)
    assert ended["output"] == "begin\nend\n" and 2 <= ended["elapsed_seconds"] < 10
    tail = client.get(check_url, {"tail_lines": 1}).json()
    assert (tail["output"], tail["output_truncated"]) == ("end\n", True)
    # The whole log stays in the sandbox, readable through the files API.
    log = client.get(f"{API}/sandboxes/{shared_sandbox}/files/download", {"path": tail["log_path"]})
    assert b"".join(log.streaming_content) == b"begin\nend\n"

    other = client.post(base, {"command": "echo waiting; sleep 60"}, format="json").json()
    cancel_url = f"{base}{other['id']}/cancel/"
    cancelled = client.post(cancel_url)
    assert cancelled.status_code == 200, cancelled.content
    assert (cancelled.json()["status"], cancelled.json()["running"]) == ("cancelled", False)
    assert client.get(f"{base}{other['id']}/").json()["status"] == "cancelled"
    assert client.post(cancel_url).json()["status"] == "cancelled"
    ps = services.run_command(world.principal(), shared_sandbox, "ps -eo args")
    assert "sleep 60" not in ps.stdout

    # The history shows both, marked as background commands.
    history = client.get(f"{API}/sandboxes/{shared_sandbox}/commands/").json()["results"]
    by_id = {c["id"]: c for c in history}
    assert by_id[body["id"]]["background"] and by_id[body["id"]]["exit_code"] == 3
    assert by_id[other["id"]]["status"] == "cancelled"

    rows = [r for r in audit_since(start) if r.action.startswith("command.background")]
    checks = len(rows) - 5  # the polling loop's number of looks varies
    assert [r.action.rsplit(".", 1)[1] for r in rows] == (
        ["start"] + ["check"] * checks + ["start", "cancel", "check", "cancel"]
    )
    assert {(r.channel, r.actor_id, r.outcome, r.source_address) for r in rows} == {
        (Channel.API, world.alice.pk, "ok", "127.0.0.1")
    }


@pytest.fixture
def running_task(world, shared_sandbox):
    """A background command of team A's shared sandbox, cancelled afterwards."""
    principal = world.principal()
    result = services.start_background(principal, shared_sandbox, "sleep 60")
    yield result.id
    services.cancel_background(principal, shared_sandbox, result.id)


def endpoints(sandbox_id: str, command_id: int) -> list[tuple[str, str, dict]]:
    base = f"{API}/sandboxes/{sandbox_id}/background/"
    return [
        ("post", base, {"data": {"command": "touch /workspace/b"}, "format": "json"}),
        ("get", f"{base}{command_id}/", {}),
        ("post", f"{base}{command_id}/cancel/", {}),
    ]


def test_another_teams_key_gets_not_found(world, shared_sandbox, running_task):
    client = client_for(world, "bob")
    before = CommandExecution.objects.count()
    start = last_audit_id()
    for method, url, kwargs in endpoints(shared_sandbox, running_task):
        response = getattr(client, method)(url, **kwargs)
        assert response.status_code == 404, (method, url, response.content)
        assert response.json() == {
            "detail": f"sandbox {shared_sandbox} not found",
            "code": "not_found",
        }
    assert CommandExecution.objects.count() == before
    assert CommandExecution.objects.get(pk=running_task).status == "running"
    rows = audit_since(start)
    assert [r.action for r in rows] == [
        "command.background.start",
        "command.background.check",
        "command.background.cancel",
    ]
    assert {(r.channel, r.actor_id, r.outcome) for r in rows} == {
        (Channel.API, world.bob.pk, "not_found")
    }


@pytest.mark.parametrize(
    "key_name, reason", [("alice_read", "no write scope"), ("victor", "a viewer may not")]
)
@pytest.mark.audit_views
def test_read_scope_and_viewer_keys_may_check_but_not_start_or_cancel(
    world, shared_sandbox, running_task, key_name, reason
):
    client = client_for(world, key_name)
    before = CommandExecution.objects.count()
    start = last_audit_id()
    start_call, check_call, cancel_call = endpoints(shared_sandbox, running_task)
    for method, url, kwargs in (start_call, cancel_call):
        response = getattr(client, method)(url, **kwargs)
        assert response.status_code == 403, (method, url, response.content)
        assert reason in response.json()["detail"], response.json()
    checked = client.get(check_call[1])
    assert checked.status_code == 200 and checked.json()["running"]
    assert CommandExecution.objects.count() == before
    assert CommandExecution.objects.get(pk=running_task).status == "running"
    rows = audit_since(start)
    assert [(r.action, r.outcome) for r in rows] == [
        ("command.background.start", "forbidden"),
        ("command.background.cancel", "forbidden"),
        ("command.background.check", "ok"),
    ]
    assert {r.channel for r in rows} == {Channel.API}


def test_bad_input_gives_clear_errors(world, shared_sandbox):
    client = client_for(world, "alice")
    base = f"{API}/sandboxes/{shared_sandbox}/background/"
    foreground = services.run_command(world.principal(), shared_sandbox, "true")
    before = CommandExecution.objects.count()
    cases = [
        ("post", base, {"command": "true", "timeout": 5}, 400, "unknown field"),
        ("post", base, {"command": "true", "max_runtime_seconds": 10**6}, 400, "less than or"),
        ("post", base, {"command": "true", "max_runtime_seconds": 0}, 400, "greater than or"),
        ("post", base, {"command": "  "}, 400, "command is empty"),
        ("post", base, {"command": "true", "env": {"1X": "y"}}, 400, "not a valid variable"),
        ("post", base, {}, 400, "This field is required"),
        ("get", f"{base}{foreground.id}/", None, 404, "background command"),
        ("get", f"{base}{foreground.id}/?tail_lines=-1", None, 400, "greater than or equal"),
        ("get", f"{base}{foreground.id}/?tail_lines=lots", None, 400, "valid integer"),
        ("post", f"{base}{10**9}/cancel/", None, 404, f"background command {10**9} not found"),
        ("get", f"{API}/sandboxes/sb_doesnotexist/background/1/", None, 404, "not found"),
    ]
    for method, url, data, status, text in cases:
        send = client.post if method == "post" else client.get
        response = send(url, data, format="json") if data is not None else send(url)
        assert response.status_code == status, (url, data, response.content[:300])
        assert text in str(response.json()), (url, data, response.json())
    assert CommandExecution.objects.count() == before


def test_schema_lists_the_background_endpoints_and_validates(world):
    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    paths = schema["paths"]
    start = paths["/api/v1/sandboxes/{sandbox_id}/background/"]["post"]
    assert "202" in start["responses"] and "Location" in start["responses"]["202"]["headers"]
    check = paths["/api/v1/sandboxes/{sandbox_id}/background/{command_id}/"]["get"]
    assert "tail_lines" in {p["name"] for p in check["parameters"]}
    assert "post" in paths["/api/v1/sandboxes/{sandbox_id}/background/{command_id}/cancel/"]
