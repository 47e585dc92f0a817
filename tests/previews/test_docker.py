"""Previews end to end on the real Docker engine: an app deployed through MCP over HTTP
(fastmcp.Client, API key) in a sandbox WITHOUT network answers through the preview proxy of a
live uvicorn (platform_site.asgi), by path and by host name, with its token, with a member's
session, and not otherwise.

The apps are stdlib programs from tests/fixtures/previews/: app.py (http.server with routes
that show what the proxy passes on) and ws_echo.py (a websocket echo server).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2 as httpx
import pytest
from django.conf import settings
from django.test import Client as DjangoClient
from django.utils import timezone
from fastmcp import Client
from fastmcp.exceptions import ToolError
from websockets.sync.client import connect as ws_connect

from sandboxes import services
from sandboxes.contract.results import UploadFile
from sandboxes.models import AccessLink, Preview, Sandbox
from tests.live import World, run
from tests.memory import MIB, peak_rss, reset_peak_rss

pytestmark = [
    pytest.mark.docker,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "previews"
APP_PORT, WS_PORT = 8000, 8765


def files(*names: str) -> list[dict[str, str]]:
    return [{"path": name, "content": (FIXTURES / name).read_text()} for name in names]


def mcp(server: str, key: str) -> Client:
    return Client(f"{server}/mcp/", auth=key, timeout=120)


@pytest.fixture(scope="module")
def deployed(world: World, asgi_server: str) -> dict[str, Any]:
    """One sandbox (no network) with app.py and ws_echo.py deployed through MCP."""

    async def go() -> dict[str, Any]:
        async with mcp(asgi_server, world.keys["alice"]) as client:
            box = (await client.call_tool("create_sandbox", {"memory_mb": 256})).structured_content
            try:
                app = await client.call_tool(
                    "deploy_app",
                    {
                        "sandbox_id": box["id"],
                        "command": f"python3 app.py {APP_PORT}",
                        "port": APP_PORT,
                        "files": files("app.py", "ws_echo.py"),
                        "wait_seconds": 30,
                    },
                )
                echo = await client.call_tool(
                    "deploy_app",
                    {
                        "sandbox_id": box["id"],
                        "command": f"python3 ws_echo.py {WS_PORT}",
                        "port": WS_PORT,
                    },
                )
            except BaseException:  # the fixture never yields: its sandbox must not stay
                await client.call_tool("delete_sandbox", {"sandbox_id": box["id"]})
                raise
            return {"box": box, "app": app.structured_content, "ws": echo.structured_content}

    made = run(go())
    yield made
    services.delete_sandbox(world.principal(), made["box"]["id"])


def session_cookie(user) -> str:
    client = DjangoClient()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def test_the_sandbox_has_no_network_yet_its_app_answers_by_its_url(deployed, asgi_server):
    assert deployed["box"]["network"] is False
    url = deployed["app"]["url"]
    assert url.startswith(f"{asgi_server}/preview/{deployed['box']['id']}/{APP_PORT}/?")
    with httpx.Client(follow_redirects=False) as http:
        first = http.get(url)
        # The token in the link becomes a cookie of this preview, and leaves the address.
        assert first.status_code == 302
        assert first.headers["location"] == f"/preview/{deployed['box']['id']}/{APP_PORT}/"
        cookie = first.headers["set-cookie"]
        assert f"Path=/preview/{deployed['box']['id']}/{APP_PORT}/" in cookie
        assert "HttpOnly" in cookie
        listing = http.get(asgi_server + first.headers["location"])
        assert listing.status_code == 200 and "app.py" in listing.text
        hello = http.get(f"{asgi_server}/preview/{deployed['box']['id']}/{APP_PORT}/hello")
        assert hello.text == "hello from the sandbox\n"
        # Path mode shares the platform's origin: the app's pages are sandboxed.
        assert hello.headers["content-security-policy"].startswith("sandbox ")


def test_the_app_never_sees_the_platforms_cookies_nor_sets_them(deployed, asgi_server, world):
    """Path mode (issue 24): the app's cookies are its preview's own, their names scoped to
    it and their path its prefix, so its `sessionid` is no platform session; it gets back
    only cookies of its own scope, never the platform's nor an unscoped one."""
    prefix = f"/preview/{deployed['box']['id']}/{APP_PORT}"
    base = f"{asgi_server}{prefix}"
    session = session_cookie(world.alice)
    platform = f"{settings.SESSION_COOKIE_NAME}={session}; csrftoken=abc; mine=unscoped"
    with httpx.Client() as http:
        answer = http.get(f"{base}/cookies", headers={"Cookie": platform})
        set_cookies = answer.headers.get_list("set-cookie")
        names = [value.split("=", 1)[0] for value in set_cookies]
        assert len(names) == 2 and names[0].endswith("_sessionid") and names[1].endswith("_app")
        assert settings.SESSION_COOKIE_NAME not in names
        assert all(f"Path={prefix}/" in value for value in set_cookies)
        own = "; ".join(value.split(";", 1)[0] for value in set_cookies)
        seen = http.get(f"{base}/headers?x=1", headers={"Cookie": f"{platform}; {own}"}).json()
        assert seen["path"] == "/headers?x=1"
        assert seen["headers"]["cookie"] == "sessionid=from-the-app; app=1"
        assert seen["headers"]["x-forwarded-prefix"] == prefix
        moved = http.get(f"{base}/go-home", headers={"Cookie": platform}, follow_redirects=False)
        assert moved.headers["location"] == f"{prefix}/hello"


def test_who_may_open_a_preview(deployed, asgi_server, world):
    url = f"{asgi_server}/preview/{deployed['box']['id']}/{APP_PORT}/hello"
    name = settings.SESSION_COOKIE_NAME
    with httpx.Client() as http:
        assert http.get(url).status_code == 404  # nobody
        alice = http.get(url, headers={"Cookie": f"{name}={session_cookie(world.alice)}"})
        assert alice.status_code == 200
        victor = http.get(url, headers={"Cookie": f"{name}={session_cookie(world.victor)}"})
        assert victor.status_code == 200  # a viewer of the team may look
        bob = http.get(url, headers={"Cookie": f"{name}={session_cookie(world.bob)}"})
        assert bob.status_code == 404 and "hello" not in bob.text  # another team
        forged = http.get(url, headers={"Cookie": f"sandhub_preview=x{deployed['app']['url']}"})
        assert forged.status_code == 404
        # A port with no open preview is refused even to a member.
        other = url.replace(f"/{APP_PORT}/", "/8001/")
        assert (
            http.get(other, headers={"Cookie": f"{name}={session_cookie(world.alice)}"}).status_code
            == 404
        )


def test_an_expired_token_is_refused(deployed, asgi_server, world):
    box = deployed["box"]["id"]
    stale = services.get_preview_url(world.principal(), box, APP_PORT, expires_seconds=300)
    fresh = services.get_preview_url(world.principal(), box, APP_PORT, expires_seconds=300)
    over = timezone.now() - timedelta(seconds=1)
    AccessLink.objects.filter(public_id=stale.link_id).update(expires_at=over)
    with httpx.Client() as http:
        url = f"{asgi_server}/preview/{box}/{APP_PORT}/hello"
        assert http.get(url, params={"sandhub_token": stale.token}).status_code == 404
        cookie = {"Cookie": f"sandhub_preview={stale.token}"}
        assert http.get(url, headers=cookie).status_code == 404
        cookie = {"Cookie": f"sandhub_preview={fresh.token}"}
        assert http.get(url, headers=cookie).status_code == 200


def test_host_name_mode(deployed, asgi_server, world, settings):
    settings.SANDHUB_PREVIEW_DOMAIN = "localhost"  # the live server runs in this process

    async def link() -> str:
        async with mcp(asgi_server, world.keys["alice"]) as client:
            answer = await client.call_tool(
                "get_preview_url", {"sandbox_id": deployed["box"]["id"], "port": APP_PORT}
            )
            return answer.structured_content["url"]

    url = urlsplit(run(link()))
    label = f"{APP_PORT}-{deployed['box']['id'].replace('_', '-')}"
    assert url.hostname == f"{label}.localhost" and url.path == "/"
    host = f"{url.hostname}:{url.port}"
    with httpx.Client(follow_redirects=False) as http:
        first = http.get(f"{asgi_server}/?{url.query}", headers={"Host": host})
        assert first.status_code == 302 and first.headers["location"] == "/"
        token = first.headers["set-cookie"].split(";")[0]
        hello = http.get(f"{asgi_server}/hello", headers={"Host": host, "Cookie": token})
        assert hello.text == "hello from the sandbox\n"
        assert "content-security-policy" not in hello.headers  # an origin of its own
        # The platform itself is not reachable under a preview host name.
        mcp_there = http.get(f"{asgi_server}/mcp/", headers={"Host": host})
        assert mcp_there.status_code == 404
        wrong = http.get(f"{asgi_server}/hello", headers={"Host": f"1-{label}.localhost"})
        assert wrong.status_code == 404


def test_a_50_mb_download_is_identical_and_costs_the_platform_no_memory(
    deployed, asgi_server, world
):
    box = deployed["box"]["id"]
    made = services.run_command(
        world.principal(), box, "head -c 50000000 /dev/urandom > big.bin && sha256sum big.bin"
    )
    expected = made.stdout.split()[0]
    baseline = reset_peak_rss()
    digest, size = hashlib.sha256(), 0
    url = f"{asgi_server}/preview/{box}/{APP_PORT}/big.bin"
    cookie = f"{settings.SESSION_COOKIE_NAME}={session_cookie(world.alice)}"
    with httpx.Client() as http, http.stream("GET", url, headers={"Cookie": cookie}) as answer:
        assert answer.status_code == 200
        for chunk in answer.iter_bytes():
            digest.update(chunk)
            size += len(chunk)
    grown = peak_rss() - baseline
    print(f"50 MB through the preview proxy: peak RSS grew {grown // 1024} kB")
    assert size == 50_000_000 and digest.hexdigest() == expected
    assert grown < 10 * MIB


def test_an_upload_streams_to_the_app(deployed, asgi_server, world):
    body = bytes(range(256)) * 4096 * 3  # 3 MiB
    url = f"{asgi_server}/preview/{deployed['box']['id']}/{APP_PORT}/echo"
    cookie = f"{settings.SESSION_COOKIE_NAME}={session_cookie(world.alice)}"
    with httpx.Client() as http:
        answer = http.post(url, content=body, headers={"Cookie": cookie})
    assert answer.status_code == 200 and answer.content == body


def test_a_websocket_round_trips(deployed, asgi_server):
    url = deployed["ws"]["url"].replace("http://", "ws://")
    with ws_connect(url, open_timeout=10) as socket:
        socket.send("hello")
        assert socket.recv(timeout=10) == "hello"
        blob = bytes(range(256)) * 1000
        socket.send(blob)
        assert socket.recv(timeout=10) == blob
        for index in range(50):
            socket.send(f"message {index}")
        assert [socket.recv(timeout=10) for _ in range(50)] == [f"message {i}" for i in range(50)]


def test_a_crashing_app_reports_its_log_and_leaves_nothing_open(deployed, asgi_server, world):
    async def deploy() -> str:
        async with mcp(asgi_server, world.keys["alice"]) as client:
            with pytest.raises(ToolError) as refused:
                await client.call_tool(
                    "deploy_app",
                    {
                        "sandbox_id": deployed["box"]["id"],
                        "command": "echo crashing-on-purpose >&2; exit 3",
                        "port": 8200,
                    },
                )
            return str(refused.value)

    message = run(deploy())
    assert "crashing-on-purpose" in message
    assert not Preview.objects.filter(
        sandbox__public_id=deployed["box"]["id"], port=8200, stopped_at=None
    ).exists()


def test_stop_app_then_delete_close_the_previews(world, asgi_server):
    principal = world.principal()
    box = services.create_sandbox(principal, memory_mb=256).id
    try:
        services.upload_files(principal, box, _uploads("app.py"))
        app = services.deploy_app(principal, box, command="python3 app.py 8000", port=8000)
        url = f"{asgi_server}/preview/{box}/8000/hello"
        cookie = {"Cookie": f"sandhub_preview={app.token}"}
        with httpx.Client() as http:
            assert http.get(url, headers=cookie).status_code == 200
            services.stop_app(principal, box, 8000)
            assert http.get(url, headers=cookie).status_code == 404
            again = services.deploy_app(principal, box, command="python3 app.py 8000", port=8000)
            fresh = {"Cookie": f"sandhub_preview={again.token}"}
            assert http.get(url, headers=fresh).status_code == 200
            assert http.get(url, headers=cookie).status_code == 404  # the old token died
            services.delete_sandbox(principal, box)
            assert http.get(url, headers=fresh).status_code == 404
    finally:
        if any(listed.id == box for listed in services.list_sandboxes(principal)):
            services.delete_sandbox(principal, box)


def _uploads(*names: str) -> list[UploadFile]:
    return [UploadFile(name, (FIXTURES / name).read_bytes()) for name in names]


def test_preview_traffic_counts_as_the_sandboxs_activity(deployed, asgi_server, world):
    box = deployed["box"]["id"]
    long_ago = timezone.now() - timedelta(hours=1)
    Sandbox.objects.filter(public_id=box).update(last_activity_at=long_ago)
    cookie = f"{settings.SESSION_COOKIE_NAME}={session_cookie(world.alice)}"
    with httpx.Client() as http:
        answer = http.get(
            f"{asgi_server}/preview/{box}/{APP_PORT}/hello", headers={"Cookie": cookie}
        )
    assert answer.status_code == 200
    assert Sandbox.objects.get(public_id=box).last_activity_at > long_ago + timedelta(minutes=59)
