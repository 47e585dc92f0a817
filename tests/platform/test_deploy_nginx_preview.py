"""A real preview through the production layout (deploy/nginx/sandhub.conf in front of two
web processes, tests/platform/deploy_stack.py): an app in a sandbox on the real Docker
engine, reached over TLS at PORT-SANDBOX.<preview domain> through nginx's wildcard server,
by HTTP (its token becomes a Secure cookie: the platform knows it is served over https) and by
websocket (nginx passes the upgrade to the preview proxy, which carries it to the app).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from websockets.sync.client import connect as ws_connect

from sandboxes import services
from tests.live import World
from tests.platform.deploy_stack import PREVIEW_DOMAIN, Nginx, nginx_binary, production_stack

NGINX = nginx_binary()
pytestmark = [
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)"),
    pytest.mark.docker,
]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "previews"
HTTP_PORT, WS_PORT = 8000, 8765


@pytest.fixture(scope="module")
def stack(world: World, tmp_path_factory) -> Iterator[tuple[Nginx, ssl.SSLContext]]:
    directory = tmp_path_factory.mktemp("deploy-preview")
    assert NGINX is not None
    with production_stack(NGINX, directory) as nginx:
        yield nginx, ssl.create_default_context(cafile=str(directory / "cert.pem"))


@pytest.fixture(scope="module")
def apps(world: World, shared_sandbox: str) -> dict[int, str]:
    """A static server and a websocket echo deployed in the sandbox: {port: token}."""
    principal = world.principal()
    services.write_file(
        principal, shared_sandbox, "ws_echo.py", (FIXTURES / "ws_echo.py").read_text()
    )
    services.write_file(principal, shared_sandbox, "hello.txt", "hello through nginx\n")
    tokens = {}
    for port, command in (
        (HTTP_PORT, f"python3 -m http.server {HTTP_PORT}"),
        (WS_PORT, f"python3 ws_echo.py {WS_PORT}"),
    ):
        deployed = services.deploy_app(
            principal, shared_sandbox, command=command, port=port, wait_seconds=60
        )
        tokens[port] = deployed.token
    return tokens


def preview_host(sandbox_id: str, port: int) -> str:
    return f"{port}-{sandbox_id.replace('_', '-')}.{PREVIEW_DOMAIN}"


def test_an_app_answers_at_its_preview_host_through_nginx(stack, apps, shared_sandbox):
    nginx, trust = stack
    host = preview_host(shared_sandbox, HTTP_PORT)
    origin = f"https://127.0.0.1:{nginx.tls_port}"
    headers = {"Host": f"{host}:{nginx.tls_port}"}
    sni = {"sni_hostname": host}
    with httpx.Client(verify=trust, timeout=60, follow_redirects=False) as http:
        first = http.get(
            f"{origin}/hello.txt",
            params={services.PREVIEW_TOKEN_PARAM: apps[HTTP_PORT]},
            headers=headers,
            extensions=sni,
        )
        assert first.status_code == 302 and first.headers["location"] == "/hello.txt"
        cookie = first.headers["set-cookie"]
        assert "Secure" in cookie  # X-Forwarded-Proto reached the preview proxy
        jar = {"Cookie": cookie.split(";")[0], **headers}
        page = http.get(f"{origin}/hello.txt", headers=jar, extensions=sni)
    assert page.status_code == 200 and page.text == "hello through nginx\n"


def test_an_apps_websocket_round_trips_through_nginx(stack, apps, shared_sandbox):
    nginx, trust = stack
    host = preview_host(shared_sandbox, WS_PORT)
    url = f"wss://{host}:{nginx.tls_port}/?{services.PREVIEW_TOKEN_PARAM}={apps[WS_PORT]}"
    raw = socket.create_connection(("127.0.0.1", nginx.tls_port), timeout=30)
    with ws_connect(
        url,
        sock=raw,
        ssl=trust,
        server_hostname=host,
        origin=f"https://{host}:{nginx.tls_port}",
        open_timeout=30,
    ) as echo:
        echo.send("through nginx")
        assert echo.recv(timeout=30) == "through nginx"
        blob = bytes(range(256)) * 200
        echo.send(blob)
        assert echo.recv(timeout=30) == blob
