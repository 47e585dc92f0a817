"""The production layout of docs/deploy.md, proven on loopback: nginx running
deploy/nginx/sandhub.conf (rendered for this machine, a self-signed certificate) in front of
two web processes started by scripts/web.sh on the test database. Over TLS through nginx: a
page, a REST call and an MCP call (a real fastmcp client) work and both upstreams serve; a
terminal websocket upgrades and the platform answers on it; a host name under the wildcard
preview domain reaches the preview proxy; an oversized header is refused by nginx; and the
client address the platform records is the client's own, whatever X-Forwarded-For it forges.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from tenants import apikeys
from tenants.models import ApiKey
from tests.live import World, in_thread
from tests.platform.deploy_stack import (
    PLATFORM_HOST,
    PREVIEW_DOMAIN,
    Nginx,
    nginx_binary,
    production_stack,
)
from tests.web.terminals import session_cookie

NGINX = nginx_binary()
pytestmark = [
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)"),
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]
CLIENT_ADDRESS = "127.0.0.7"  # the test's client connects from here; nginx from 127.0.0.1
FORGED = "203.0.113.9"


@pytest.fixture(scope="module")
def stack(world: World, tmp_path_factory) -> Iterator[tuple[Nginx, Path]]:
    directory = tmp_path_factory.mktemp("deploy")
    assert NGINX is not None
    with production_stack(NGINX, directory) as nginx:
        yield nginx, directory / "cert.pem"


@pytest.fixture(scope="module")
def nginx(stack) -> Nginx:
    return stack[0]


@pytest.fixture(scope="module")
def trust(stack) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(stack[1]))


def base(nginx: Nginx) -> str:
    return f"https://{PLATFORM_HOST}:{nginx.tls_port}"


def client(trust: ssl.SSLContext) -> httpx.Client:
    """An https client connecting from CLIENT_ADDRESS, as a remote machine would."""
    transport = httpx.HTTPTransport(verify=trust, local_address=CLIENT_ADDRESS)
    return httpx.Client(transport=transport, follow_redirects=False, timeout=30)


def test_a_page_and_a_rest_call_work_over_tls_and_both_web_processes_serve(nginx, trust, world):
    with client(trust) as http:
        login = http.get(f"{base(nginx)}/login/")
        assert login.status_code == 200 and 'name="password"' in login.text
        # The platform knows it is served over https: its cookies travel over https only.
        assert "Secure" in login.headers["set-cookie"]
        assert login.headers["strict-transport-security"] == "max-age=31536000"
        auth = {"Authorization": f"Bearer {world.keys['alice']}"}
        for _ in range(4):
            listed = http.get(f"{base(nginx)}/api/v1/sandboxes/", headers=auth)
            assert listed.status_code == 200, listed.text
            assert "results" in listed.json()
    assert len(nginx.upstreams_used()) == 2, nginx.log_lines()


def test_the_recorded_client_address_is_the_clients_and_cannot_be_forged(nginx, trust, world):
    key = apikeys.create_key(world.alice, world.team_a, name="behind-nginx", scopes="read")
    forged = {"Authorization": f"Bearer {key.plaintext}", "X-Forwarded-For": FORGED}
    with client(trust) as http:
        answer = http.get(f"{base(nginx)}/api/v1/sandboxes/", headers=forged)
    assert answer.status_code == 200, answer.text
    row = ApiKey.objects.get(pk=key.key.pk)
    assert row.last_used_address == CLIENT_ADDRESS


def test_an_mcp_call_with_a_fastmcp_client_works_through_nginx(nginx, trust, world):
    transport = StreamableHttpTransport(
        f"{base(nginx)}/mcp/", auth=world.keys["alice"], verify=trust
    )

    async def call() -> dict:
        async with Client(transport, timeout=60) as mcp:
            answer = await mcp.call_tool("list_hosts", {})
            return answer.structured_content or {}

    hosts = asyncio.run(call())
    assert "local" in str(hosts), hosts
    used = [line for line in nginx.log_lines() if '"POST /mcp/' in line]
    assert used and all(" 200 " in line or " 202 " in line for line in used), used


def test_a_terminal_websocket_upgrades_through_nginx(nginx, trust, world):
    """The platform's own page opens it (Origin and Host as the browser sends them, over
    https): nginx passes the upgrade, and the platform accepts and closes it with its own
    code for a sandbox it does not know (4404), proving it reached the terminal route."""
    url = f"wss://{PLATFORM_HOST}:{nginx.tls_port}/ws/sandboxes/sb_nosuch/terminals/t1/"
    headers = {"Cookie": asyncio.run(in_thread(session_cookie, world.alice, "alpha"))}
    with (
        ws_connect(
            url, ssl=trust, origin=base(nginx), additional_headers=headers, open_timeout=20
        ) as socket_,
        pytest.raises(ConnectionClosed) as closed,
    ):
        socket_.recv(timeout=20)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404
    # From another origin (a preview's page) the same upgrade is refused before it opens.
    with pytest.raises(Exception, match="403"):
        ws_connect(
            url,
            ssl=trust,
            origin=f"https://8000-sb-x.{PREVIEW_DOMAIN}",
            additional_headers=headers,
            open_timeout=20,
        )


def test_a_host_under_the_wildcard_preview_domain_reaches_the_preview_proxy(nginx, trust):
    preview = f"8000-sb-nosuch.{PREVIEW_DOMAIN}"
    transport = httpx.HTTPTransport(verify=False)
    with httpx.Client(transport=transport, timeout=30) as http:
        there = http.get(
            f"https://127.0.0.1:{nginx.tls_port}/mcp/",
            headers={"Host": f"{preview}:{nginx.tls_port}"},
            extensions={"sni_hostname": preview},
        )
        here = http.get(
            f"https://127.0.0.1:{nginx.tls_port}/mcp/",
            headers={"Host": f"{PLATFORM_HOST}:{nginx.tls_port}"},
            extensions={"sni_hostname": PLATFORM_HOST},
        )
    # The preview proxy's own plain answer (every path on a preview host is the app's), where
    # the platform's host answers MCP's (GET: 405, no server-to-client stream).
    assert there.status_code == 404 and there.text == "not found\n", there.text
    assert there.headers["cache-control"] == "no-store"
    assert here.status_code == 405


def test_an_oversized_header_is_refused_by_nginx_before_any_web_process(nginx, trust):
    with client(trust) as http:
        big = http.get(f"{base(nginx)}/login/", headers={"X-Big": "a" * 20_000})
        fine = http.get(f"{base(nginx)}/login/", headers={"X-Fine": "a" * 8_000})
    assert big.status_code == 400 and "nginx" in big.text
    assert fine.status_code == 200
    refused = [line for line in nginx.log_lines() if " 400 " in line]
    assert refused and all(line.endswith("upstream=-") for line in refused), refused


def test_plain_http_is_redirected_and_unknown_names_get_no_tls(nginx, trust):
    answer = httpx.get(f"http://{PLATFORM_HOST}:{nginx.http_port}/keys/?a=1")
    assert answer.status_code == 308
    assert answer.headers["location"] == f"https://{PLATFORM_HOST}/keys/?a=1"
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", nginx.tls_port), timeout=10)
    with raw, pytest.raises(ssl.SSLError):
        insecure.wrap_socket(raw, server_hostname="elsewhere.example").close()
