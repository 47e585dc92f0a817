"""Previews through the interfaces, on the in-memory backend with a real loopback app: the MCP
tools (a real client against the live server) and the REST endpoints return URLs whose token
opens the app, stop it, refuse other teams and viewers, and show a crashed app's log; the
URL's two forms (path and host name); the schema documents the endpoints."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import cache
from django.test import override_settings
from fastmcp import Client
from rest_framework.test import APIClient

from hosts.backends import reset_backends
from sandboxes import services
from sandboxes.contract.errors import BackendFailure
from sandboxes.models import CommandExecution, Preview
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.live import run
from tests.previews.helpers import PAGE, PageApp, ask, http_get

pytestmark = pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
API = "/api/v1"


@pytest.fixture(scope="module")
def app_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), PageApp)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def sandbox(world, app_server) -> Iterator[str]:
    """A fake sandbox of team A where a job with a `serve 8000` step is the app on 8000."""
    with override_settings(SANDHUB_BACKENDS={"docker": "tests.fakes.FakeBackend"}):
        reset_backends()
        FakeBackend.sandboxes, FakeBackend.apps = {}, {8000: app_server, 8001: app_server}
        sandbox_id = services.create_sandbox(world.principal(), name="previews").id
        try:
            yield sandbox_id
        finally:
            FakeBackend.apps = {}
            reset_backends()


@pytest.fixture(autouse=True)
def no_previews(sandbox) -> Iterator[None]:
    """Each test starts with no preview open and no audit remembered."""
    cache.clear()
    yield
    for preview in Preview.objects.open():
        services.stop_app(Principal.system(), preview.sandbox.public_id, preview.port)


def token_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)[services.PREVIEW_TOKEN_PARAM][0]


def opens_the_app(sandbox: str, url: str, port: int = 8000) -> bool:
    grant = services.authorize_preview(ask(sandbox, port, token=token_of(url)))
    return http_get(grant).endswith(PAGE)


def mcp(server: str, key: str) -> Client:
    return Client(f"{server}/mcp/", auth=key)


def text_of(result) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


# --- MCP -------------------------------------------------------------------------------------


def test_mcp_deploy_get_url_and_stop(asgi_server, world, sandbox):
    files = [{"path": "site/index.html", "content": "<h1>hi</h1>"}]

    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            deployed = await client.call_tool(
                "deploy_app",
                {
                    "sandbox_id": sandbox,
                    "command": "serve 8000; sleep 600",
                    "port": 8000,
                    "files": files,
                    "cwd": "site",
                },
            )
            link = await client.call_tool(
                "get_preview_url", {"sandbox_id": sandbox, "port": 8000, "expires_seconds": 120}
            )
            return deployed.structured_content, link.structured_content

    deployed, link = run(conversation())
    assert deployed["url"].startswith(f"{asgi_server}/preview/{sandbox}/8000/?sandhub_token=")
    assert opens_the_app(sandbox, deployed["url"]) and opens_the_app(sandbox, link["url"])
    assert link["preview_id"] == deployed["preview_id"] and link["public"] is False
    box = next(iter(FakeBackend.sandboxes.values()))
    assert box["files"]["/workspace/site/index.html"] == b"<h1>hi</h1>"
    task = CommandExecution.objects.get(pk=deployed["task_id"])
    assert (task.status, task.cwd) == ("running", "/workspace/site")

    async def stop():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return await client.call_tool("stop_app", {"sandbox_id": sandbox, "port": 8000})

    stopped = run(stop()).structured_content
    assert stopped["task_id"] == deployed["task_id"] and stopped["stopped_at"]
    assert CommandExecution.objects.get(pk=deployed["task_id"]).status == "cancelled"


def test_mcp_refuses_other_teams_and_viewers_and_shows_a_crash(asgi_server, world, sandbox):
    deploy = {"sandbox_id": sandbox, "command": "serve 8000; sleep 600", "port": 8000}

    async def conversation():
        answers = {}
        async with mcp(asgi_server, world.keys["bob"]) as client:
            for name, args in [
                ("deploy_app", deploy),
                ("get_preview_url", {"sandbox_id": sandbox, "port": 8000}),
                ("stop_app", {"sandbox_id": sandbox, "port": 8000}),
            ]:
                answers[f"bob {name}"] = await client.call_tool(name, args, raise_on_error=False)
        async with mcp(asgi_server, world.keys["victor"]) as client:
            answers["viewer"] = await client.call_tool("deploy_app", deploy, raise_on_error=False)
        async with mcp(asgi_server, world.keys["alice"]) as client:
            crash = {**deploy, "command": "echo cannot bind: in use; exit 2"}
            answers["crash"] = await client.call_tool("deploy_app", crash, raise_on_error=False)
        return answers

    answers = run(conversation())
    for name in ["bob deploy_app", "bob get_preview_url", "bob stop_app"]:
        assert answers[name].is_error and f"sandbox {sandbox} not found" in text_of(answers[name])
    assert answers["viewer"].is_error and "a viewer may not" in text_of(answers["viewer"])
    crash = text_of(answers["crash"])
    assert answers["crash"].is_error and "exit code 2" in crash and "cannot bind" in crash
    assert not Preview.objects.open().exists()


def test_tools_are_annotated(asgi_server, world):
    async def catalog():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            return {tool.name: tool for tool in await client.list_tools()}

    tools = run(catalog())
    for name in ["deploy_app", "get_preview_url", "stop_app"]:
        assert tools[name].annotations and tools[name].annotations.read_only_hint is False
    assert tools["stop_app"].annotations.destructive_hint is True
    schema = tools["deploy_app"].input_schema["properties"]
    assert schema["port"]["maximum"] == 65535 and "files" in schema


def test_host_mode_urls(asgi_server, world, sandbox):
    async def conversation():
        async with mcp(asgi_server, world.keys["alice"]) as client:
            args = {"sandbox_id": sandbox, "port": 8000}
            return (await client.call_tool("get_preview_url", args)).structured_content

    with override_settings(SANDHUB_PREVIEW_DOMAIN="preview.localhost"):
        url = run(conversation())["url"]
        label = f"8000-{sandbox.replace('_', '-')}"
        port = urlsplit(asgi_server).port
        assert url.startswith(f"http://{label}.preview.localhost:{port}/?sandhub_token=")
        assert services.parse_preview_host(f"{label}.preview.localhost:{port}") == (sandbox, 8000)
        assert services.parse_preview_host(f"{label}.elsewhere.example") is None
        assert services.parse_preview_host("preview.localhost") is None
    grant = services.authorize_preview(ask(sandbox, token=token_of(url)))
    assert (grant.sandbox_id, grant.port, grant.via) == (sandbox, 8000, "token")


def test_preview_url_forms():
    with override_settings(SANDHUB_PREVIEW_DOMAIN=""):
        assert services.preview_url("https://hub.example/", "sb_abc123", 3000, None) == (
            "https://hub.example/preview/sb_abc123/3000/"
        )
        assert services.preview_url("/", "sb_abc123", 3000, "a:b/c") == (
            "/preview/sb_abc123/3000/?sandhub_token=a%3Ab%2Fc"
        )
    with override_settings(SANDHUB_PREVIEW_DOMAIN="apps.hub.example"):
        assert services.preview_url("https://hub.example/", "sb_abc123", 3000, None) == (
            "https://3000-sb-abc123.apps.hub.example/"
        )
        assert services.parse_preview_host("3000-sb-abc123.apps.hub.example") == (
            "sb_abc123",
            3000,
        )
        for host in ["99999-sb-abc123.apps.hub.example", "3000-sb_abc123.apps.hub.example"]:
            assert services.parse_preview_host(host) is None


# --- REST ------------------------------------------------------------------------------------


def client_for(world, key_name: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys[key_name]}")
    return client


def test_rest_open_list_stop_and_deploy(world, sandbox):
    alice = client_for(world, "alice")
    base = f"{API}/sandboxes/{sandbox}"
    opened = alice.post(f"{base}/previews/", {"port": 8001}, format="json")
    assert opened.status_code == 201, opened.content
    assert opened.json()["url"].startswith(f"http://testserver/preview/{sandbox}/8001/?")
    assert "token" not in opened.json()
    grant = services.authorize_preview(ask(sandbox, 8001, token=token_of(opened.json()["url"])))
    with pytest.raises(BackendFailure, match="nothing answers on port 8001"):
        services.open_preview_stream(grant)  # opened, but no app runs there
    deployed = alice.post(
        f"{base}/deploy/",
        {
            "command": "serve 8000; sleep 600",
            "port": 8000,
            "files": [{"path": "app.py", "content": "print(1)"}],
        },
        format="json",
    )
    assert deployed.status_code == 201, deployed.content
    assert opens_the_app(sandbox, deployed.json()["url"])
    listed = alice.get(f"{base}/previews/")
    assert listed.status_code == 200
    rows = listed.json()["results"]
    assert [(r["port"], r["url"]) for r in rows] == [
        (8000, f"http://testserver/preview/{sandbox}/8000/"),
        (8001, f"http://testserver/preview/{sandbox}/8001/"),
    ]
    assert rows[0]["command_id"] == deployed.json()["command_id"]
    stopped = alice.delete(f"{base}/previews/8000/")
    assert stopped.status_code == 200 and stopped.json()["stopped_at"]
    assert alice.delete(f"{base}/previews/8000/").status_code == 404
    crashed = alice.post(f"{base}/deploy/", {"command": "exit 1", "port": 8000}, format="json")
    assert crashed.status_code == 422 and crashed.json()["code"] == "deploy_failed"


def test_rest_refuses_other_teams_viewers_and_bad_input(world, sandbox):
    base = f"{API}/sandboxes/{sandbox}"
    bob, victor = client_for(world, "bob"), client_for(world, "victor")
    for response in [
        bob.get(f"{base}/previews/"),
        bob.post(f"{base}/previews/", {"port": 8000}, format="json"),
        bob.delete(f"{base}/previews/8000/"),
        bob.post(f"{base}/deploy/", {"command": "serve 8000", "port": 8000}, format="json"),
    ]:
        assert response.status_code == 404, response.content
        assert response.json()["detail"] == f"sandbox {sandbox} not found"
    assert victor.get(f"{base}/previews/").status_code == 200
    for response in [
        victor.post(f"{base}/previews/", {"port": 8000}, format="json"),
        victor.delete(f"{base}/previews/8000/"),
        victor.post(f"{base}/deploy/", {"command": "serve 8000", "port": 8000}, format="json"),
    ]:
        assert response.status_code == 403 and "a viewer may not" in response.json()["detail"]
    alice = client_for(world, "alice")
    for body in [{"port": 0}, {"port": 8000, "expires_seconds": 10}, {"port": 8000, "x": 1}]:
        assert alice.post(f"{base}/previews/", body, format="json").status_code == 400
    assert not Preview.objects.open().exists()


def test_schema_documents_the_endpoints():
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    paths = schema["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/sandboxes/{sandbox_id}/previews/"])
    assert "delete" in paths["/api/v1/sandboxes/{sandbox_id}/previews/{port}/"]
    assert "422" in paths["/api/v1/sandboxes/{sandbox_id}/deploy/"]["post"]["responses"]
