"""Every refused request leaves exactly one audit row (issue 8, point 7): a REST validation
400, a REST 401 with a revoked key and an MCP argument-validation error left none; one MCP
run_tests left two.

REST through Django's test client, MCP through a real fastmcp Client over HTTP to the live
web process; sandboxes on the in-memory backend.
"""

from __future__ import annotations

import httpx2 as httpx
import pytest
from django.core.cache import caches
from fastmcp import Client
from rest_framework.test import APIClient

from hosts.backends import reset_backends
from sandboxes import services
from sandboxes.models import Sandbox
from tenants import ratelimits
from tenants.models import AuditLog, Channel
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.live import run

API = "/api/v1"
ADDRESS = "198.51.100.41"


@pytest.fixture(autouse=True)
def fresh_counters(world):
    caches[ratelimits.CACHE_ALIAS].clear()
    yield
    caches[ratelimits.CACHE_ALIAS].clear()


@pytest.fixture
def sandbox_id(settings, world) -> str:
    settings.SANDHUB_BACKENDS = {"docker": "tests.fakes.FakeBackend"}
    reset_backends()
    FakeBackend.sandboxes, FakeBackend.fail_provision = {}, None
    yield services.create_sandbox(world.principal()).id
    for sandbox in Sandbox.objects.exclude(status="deleted"):
        services.delete_sandbox(Principal.system(), sandbox.public_id)
    reset_backends()


def client(world, key_name: str | None = "alice") -> APIClient:
    api = APIClient(REMOTE_ADDR=ADDRESS)
    if key_name:
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys[key_name]}")
    return api


class Rows:
    """The audit rows written since it was made."""

    def __init__(self) -> None:
        self.start = AuditLog.objects.order_by("-id").values_list("id", flat=True).first() or 0

    def all(self) -> list[AuditLog]:
        return list(AuditLog.objects.filter(id__gt=self.start).order_by("id"))

    def one(self) -> AuditLog:
        rows = self.all()
        assert len(rows) == 1, [(r.action, r.outcome, r.details) for r in rows]
        return rows[0]


# --- REST ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "outcome"),
    [
        ("post", "/sandboxes/", {"data": {"cpus": "lots"}, "format": "json"}, 400, "invalid"),
        ("post", "/sandboxes/", {"data": {"colour": "red"}, "format": "json"}, 400, "invalid"),
        (
            "post",
            "/sandboxes/SB/commands/",
            {"data": b'{"command": ', "content_type": "application/json"},
            400,
            "parse_error",
        ),
        ("post", "/sandboxes/SB/commands/", {"data": {}, "format": "json"}, 400, "invalid"),
        ("get", "/sandboxes/SB/files/download", {}, 400, "invalid"),
        (
            "post",
            "/sandboxes/SB/files/",
            {"data": b"x", "content_type": "application/octet-stream"},
            400,
            "invalid",
        ),
        ("put", "/sandboxes/", {"data": {}, "format": "json"}, 405, "not_allowed"),
        (
            "post",
            "/sandboxes/",
            {"data": "x=1", "content_type": "application/x-www-form-urlencoded"},
            415,
            "media_type",
        ),
    ],
)
def test_a_rest_request_refused_before_any_service_leaves_one_row(
    world, sandbox_id, method, path, kwargs, status, outcome
):
    rows = Rows()
    path = f"{API}{path.replace('SB', sandbox_id)}"
    response = getattr(client(world), method)(path, **kwargs)
    assert response.status_code == status, response.content
    row = rows.one()
    assert (row.action, row.outcome, row.channel) == ("request.refused", outcome, Channel.API)
    assert row.target_id == f"{method.upper()} {path}"[:64]
    assert (row.actor_id, row.team_id, row.source_address) == (
        world.alice.pk,
        world.team_a.pk,
        ADDRESS,
    )
    assert row.details["api_key"] == world.rows["alice"].prefix and row.details["error"]


def test_an_upload_over_the_limit_leaves_one_row(settings, world, sandbox_id):
    settings.SANDHUB_MAX_TRANSFER_BYTES = 1024
    rows = Rows()
    response = client(world).post(
        f"{API}/sandboxes/{sandbox_id}/files/?path=big.bin",
        data=b"x" * 2048,
        content_type="application/octet-stream",
    )
    assert response.status_code == 413
    assert (rows.one().action, rows.one().outcome) == ("request.refused", "too_large")


@pytest.mark.parametrize("key_name", ["revoked", "expired", "unknown", "malformed"])
def test_a_rest_401_with_a_bad_key_leaves_one_row(world, key_name):
    rows = Rows()
    api = APIClient(REMOTE_ADDR=ADDRESS)
    key = {
        "unknown": "shk_zz00zz00_" + "u" * 43,
        "malformed": "shk_not-a-key",
    }.get(key_name) or world.keys[key_name]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get(f"{API}/sandboxes/").status_code == 401
    row = rows.one()
    assert (row.action, row.outcome, row.source_address) == ("apikey.auth", "refused", ADDRESS)
    if key_name in ("revoked", "expired"):  # the right secret: its user is on record
        assert row.details["reason"] == key_name and row.actor_id == world.alice.pk
        assert row.team_id == world.team_a.pk


def test_a_service_refusal_leaves_only_the_services_row(world, sandbox_id):
    rows = Rows()
    assert client(world, "bob").get(f"{API}/sandboxes/{sandbox_id}/").status_code == 404
    assert (rows.one().action, rows.one().outcome) == ("sandbox.get", "not_found")
    rows = Rows()
    answer = client(world, "victor").post(
        f"{API}/sandboxes/{sandbox_id}/commands/", {"command": "true"}, format="json"
    )
    assert answer.status_code == 403
    assert (rows.one().action, rows.one().outcome) == ("command.run", "forbidden")


def test_a_request_without_credentials_leaves_no_row(world):
    rows = Rows()
    assert APIClient(REMOTE_ADDR=ADDRESS).get(f"{API}/sandboxes/").status_code == 401
    assert rows.all() == []


# --- MCP -------------------------------------------------------------------------------------


def call(server: str, key: str, tool: str, arguments: dict):
    async def conversation():
        async with Client(f"{server}/mcp/", auth=key) as mcp:
            return await mcp.call_tool(tool, arguments, raise_on_error=False)

    return run(conversation())


@pytest.mark.parametrize(
    ("tool", "arguments", "outcome"),
    [
        ("run_command", {"sandbox_id": "SB"}, "invalid"),  # command missing
        ("run_command", {"sandbox_id": "SB", "command": "true", "timeout": -1}, "invalid"),
        ("run_command", {"sandbox_id": "SB", "command": "true", "colour": "red"}, "invalid"),
        ("create_sandbox", {"cpus": "many"}, "invalid"),
        ("upload_files", {"sandbox_id": "SB", "files": []}, "invalid"),
        ("no_such_tool", {}, "not_found"),
        # Refused by the tool before any service: no sandbox named and none selected.
        ("list_files", {}, "refused"),
        # The files are checked before the service is called.
        (
            "upload_files",
            {"sandbox_id": "SB", "files": [{"path": "x", "content": "%%", "encoding": "base64"}]},
            "invalid",
        ),
    ],
)
def test_an_mcp_call_refused_before_any_service_leaves_one_row(
    asgi_server, world, sandbox_id, tool, arguments, outcome
):
    arguments = {k: sandbox_id if v == "SB" else v for k, v in arguments.items()}
    rows = Rows()
    result = call(asgi_server, world.keys["dave"], tool, arguments)
    assert result.is_error
    row = rows.one()
    assert (row.action, row.outcome, row.channel) == ("request.refused", outcome, Channel.MCP)
    assert row.target_id == f"tool {tool}"
    assert (row.actor_id, row.team_id, row.source_address) == (
        world.dave.pk,
        world.team_a.pk,
        "127.0.0.1",
    )
    assert row.details["api_key"] == world.rows["dave"].prefix and row.details["error"]


def test_an_mcp_service_refusal_leaves_only_the_services_row(asgi_server, world, sandbox_id):
    rows = Rows()
    result = call(asgi_server, world.keys["bob"], "get_sandbox", {"sandbox_id": sandbox_id})
    assert result.is_error
    assert (rows.one().action, rows.one().outcome) == ("sandbox.get", "not_found")


def test_an_mcp_request_with_a_revoked_key_leaves_one_row(asgi_server, world):
    rows = Rows()
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {world.keys['revoked']}",
    }
    assert httpx.post(f"{asgi_server}/mcp/", json=body, headers=headers).status_code == 401
    row = rows.one()
    assert (row.action, row.outcome, row.channel) == ("apikey.auth", "refused", Channel.MCP)
    assert row.details["reason"] == "revoked" and row.actor_id == world.alice.pk


def test_one_mcp_run_tests_call_leaves_only_the_workflows_rows(asgi_server, world, sandbox_id):
    rows = Rows()
    result = call(
        asgi_server,
        world.keys["alice"],
        "run_tests",
        {"sandbox_id": sandbox_id, "command": "true", "junit_report": False},
    )
    assert not result.is_error, result.content
    # The one written with the command's record, and the end that continues it: no row of
    # the tool's own, none of the steps'.
    opened, closed = rows.all()
    for row in (opened, closed):
        assert (row.action, row.outcome, row.target_id) == ("command.tests", "ok", sandbox_id)
    assert closed.details["continues"] == opened.pk
    row = closed
