"""Previews end to end on an SSH host (a real OpenSSH sshd on loopback, tests/ssh/sshd.py): apps
deployed through MCP over HTTP (fastmcp.Client, API keys) into sandboxes of a host shared by
every team, whose login user may sudo (each sandbox runs as a Unix user of its own, and its
ports are reached through the sandbox agent), answer through the preview proxy of a live
uvicorn (platform_site.asgi), to their token and their team's sessions only.

The SSH host's loopback is this machine's, shared with every other test running meanwhile:
the apps listen on free ports found when the module starts, never on fixed ones. On that
shared loopback, one team's sandbox must not be able to preview another team's listener.
The apps are the stdlib programs of tests/fixtures/previews/ (as tests/previews/test_docker.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from django.conf import settings
from django.test import Client as DjangoClient
from fastmcp import Client
from fastmcp.exceptions import ToolError
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from hosts.models import Host
from sandboxes import services
from sandboxes.models import Preview, Sandbox
from tenants.principal import Principal
from tests.leftovers import remove_sandboxes_under
from tests.live import World, run
from tests.ssh.helpers import register
from tests.ssh.logins import SUDO_USER
from tests.ssh.sshd import Sshd

pytestmark = [
    pytest.mark.sshd,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "previews"
DOWNLOAD_BYTES = 8_000_000
B_SECRET = "team B's secret page, never to be seen through team A's preview\n"


def free_ports(count: int) -> list[int]:
    """Distinct ports free on this machine's loopback (each held until all are found)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            probe = held.enter_context(socket.socket())
            probe.bind(("127.0.0.1", 0))
            ports.append(int(probe.getsockname()[1]))
        return ports


APP_PORT, WS_PORT, CRASH_PORT, B_PORT = free_ports(4)


def files(*names: str) -> list[dict[str, str]]:
    return [{"path": name, "content": (FIXTURES / name).read_text()} for name in names]


def mcp(server_url: str, key: str) -> Client:
    return Client(f"{server_url}/mcp/", auth=key, timeout=120)


def session_cookie(user: Any) -> str:
    client = DjangoClient()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def state_of(sandbox_id: str) -> dict[str, Any]:
    return Sandbox.objects.get(public_id=sandbox_id).backend_state


# -- the host and the apps ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def module_workdir() -> Iterator[Path]:
    """A base directory of this module's own; what a failed run left of its sandboxes (their
    users and processes) goes with it (as tests/conftest.py's `workdir`)."""
    path = Path(tempfile.mkdtemp(prefix="sandhub-previews-ssh-", dir="/var/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        remove_sandboxes_under(path)
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_host(world: World, server: Sshd, module_workdir: Path) -> Iterator[Host]:
    """Shared by every team, its login user may sudo: sandboxes get users of their own. The
    only enabled host, so create_sandbox lands there."""
    Host.objects.filter(kind=Host.Kind.DOCKER).update(enabled=False)
    host = register(server, "previews-ssh", SUDO_USER, module_workdir / "base")
    assert host.per_sandbox_users and host.team is None
    yield host
    Host.objects.filter(pk=host.pk).update(enabled=False)


@pytest.fixture(scope="module")
def deployed(world: World, asgi_server: str, shared_host: Host) -> Iterator[dict[str, Any]]:
    """Team A's sandbox on the shared host with app.py and ws_echo.py deployed through MCP."""

    async def go() -> dict[str, Any]:
        async with mcp(asgi_server, world.keys["alice"]) as client:
            box = (await client.call_tool("create_sandbox", {})).structured_content
            made: dict[str, Any] = {"box": box}
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
                made["app"] = app.structured_content
                echo = await client.call_tool(
                    "deploy_app",
                    {
                        "sandbox_id": box["id"],
                        "command": f"python3 ws_echo.py {WS_PORT}",
                        "port": WS_PORT,
                    },
                )
                made["ws"] = echo.structured_content
            except BaseException:
                await client.call_tool("delete_sandbox", {"sandbox_id": box["id"]})
                raise
            return made

    made = run(go())
    yield made
    services.delete_sandbox(world.principal(), made["box"]["id"])


@pytest.fixture(scope="module")
def team_b_app(world: World, asgi_server: str, shared_host: Host) -> Iterator[dict[str, Any]]:
    """Team B's sandbox on the same host, serving a page of its own on B_PORT."""
    secret = [{"path": "b-secret.txt", "content": B_SECRET}]

    async def go() -> dict[str, Any]:
        async with mcp(asgi_server, world.keys["bob"]) as client:
            box = (await client.call_tool("create_sandbox", {})).structured_content
            try:
                app = await client.call_tool(
                    "deploy_app",
                    {
                        "sandbox_id": box["id"],
                        "command": f"python3 app.py {B_PORT}",
                        "port": B_PORT,
                        "files": files("app.py") + secret,
                    },
                )
            except BaseException:
                await client.call_tool("delete_sandbox", {"sandbox_id": box["id"]})
                raise
            return {"box": box, "app": app.structured_content}

    made = run(go())
    yield made
    bob = Principal(user=world.bob, team=world.team_b, channel="web")
    services.delete_sandbox(bob, made["box"]["id"])


# -- 1. the app by its URL ---------------------------------------------------------------------


def test_the_deployed_app_answers_by_its_url(deployed, asgi_server, shared_host):
    box = deployed["box"]["id"]
    assert deployed["box"]["host"] == shared_host.name
    assert state_of(box)["own_user"] is True  # a Unix user of its own: ports go by the agent
    url = deployed["app"]["url"]
    prefix = f"/preview/{box}/{APP_PORT}/"
    assert url.startswith(f"{asgi_server}{prefix}?sandhub_token=")
    with httpx.Client(follow_redirects=False, timeout=60) as http:
        first = http.get(url)
        # The link's token becomes a cookie of this preview, and leaves the address.
        assert first.status_code == 302 and first.headers["location"] == prefix
        assert f"Path={prefix}" in first.headers["set-cookie"]
        listing = http.get(asgi_server + first.headers["location"])  # with the cookie
        assert listing.status_code == 200
        assert "app.py" in listing.text and "ws_echo.py" in listing.text
        hello = http.get(f"{asgi_server}{prefix}hello")
        assert hello.status_code == 200 and hello.text == "hello from the sandbox\n"


def test_a_download_is_byte_identical(deployed, asgi_server, world):
    box = deployed["box"]["id"]
    made = services.run_command(
        world.principal(),
        box,
        f"head -c {DOWNLOAD_BYTES} /dev/urandom > big.bin && sha256sum big.bin",
    )
    assert made.exit_code == 0, made.stderr
    expected = made.stdout.split()[0]
    digest, size = hashlib.sha256(), 0
    with httpx.Client(follow_redirects=False, timeout=60) as http:
        assert http.get(deployed["app"]["url"]).status_code == 302  # the token's cookie
        url = f"{asgi_server}/preview/{box}/{APP_PORT}/big.bin"
        with http.stream("GET", url) as answer:
            assert answer.status_code == 200
            for chunk in answer.iter_bytes():
                digest.update(chunk)
                size += len(chunk)
    assert size == DOWNLOAD_BYTES and digest.hexdigest() == expected


# -- 2. websockets -----------------------------------------------------------------------------


def test_a_websocket_round_trips(deployed):
    url = deployed["ws"]["url"].replace("http://", "ws://")
    with ws_connect(url, open_timeout=30) as ws:
        ws.send("hello over ssh")
        assert ws.recv(timeout=30) == "hello over ssh"
        blob = bytes(range(256)) * 200
        ws.send(blob)
        assert ws.recv(timeout=30) == blob
        for index in range(20):
            ws.send(f"message {index}")
        assert [ws.recv(timeout=30) for _ in range(20)] == [f"message {i}" for i in range(20)]


# -- 3. who may open it; a crashing deploy -----------------------------------------------------


def test_team_b_and_strangers_get_not_found(deployed, asgi_server, world):
    url = f"{asgi_server}/preview/{deployed['box']['id']}/{APP_PORT}/hello"
    with httpx.Client(timeout=60) as http:
        nobody = http.get(url)
        assert nobody.status_code == 404 and "hello" not in nobody.text
        bob = http.get(url, headers={"Cookie": session_cookie(world.bob)})
        assert bob.status_code == 404 and "hello" not in bob.text
        alice = http.get(url, headers={"Cookie": session_cookie(world.alice)})
        assert alice.status_code == 200 and alice.text == "hello from the sandbox\n"


def test_a_crashing_deploy_returns_its_log_tail(deployed, asgi_server, world):
    box = deployed["box"]["id"]

    async def deploy() -> str:
        async with mcp(asgi_server, world.keys["alice"]) as client:
            with pytest.raises(ToolError) as refused:
                await client.call_tool(
                    "deploy_app",
                    {
                        "sandbox_id": box,
                        "command": "echo crashing-on-purpose >&2; exit 3",
                        "port": CRASH_PORT,
                    },
                )
            return str(refused.value)

    message = run(deploy())
    assert "crashing-on-purpose" in message and "exit code 3" in message, message
    assert not Preview.objects.filter(
        sandbox__public_id=box, port=CRASH_PORT, stopped_at=None
    ).exists()


# -- 4. one team's listener is not another's preview -------------------------------------------


def test_a_sandbox_cannot_preview_another_teams_listener(deployed, team_b_app, asgi_server, world):
    mine, theirs = deployed["box"]["id"], team_b_app["box"]["id"]
    assert team_b_app["box"]["host"] == deployed["box"]["host"]  # one host
    assert state_of(mine)["user"] != state_of(theirs)["user"]
    with httpx.Client(follow_redirects=True, timeout=60) as http:
        # B's own preview shows B's page: what A must not reach.
        own = http.get(team_b_app["app"]["url"].replace("/?", "/b-secret.txt?"))
        assert own.status_code == 200 and own.text == B_SECRET

    async def as_alice() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with mcp(asgi_server, world.keys["alice"]) as client:
            args = {"sandbox_id": mine, "command": "sleep 60", "port": B_PORT, "wait_seconds": 3}
            with pytest.raises(ToolError) as refused:
                await client.call_tool("deploy_app", args)
            out["waiting"] = str(refused.value)
            link = await client.call_tool("get_preview_url", {"sandbox_id": mine, "port": B_PORT})
            out["url"] = link.structured_content["url"]
        return out

    out = run(as_alice())
    # deploy_app does not take B's listener for A's app: it waits for one of A's own.
    assert f"port {B_PORT} did not answer within 3 s" in out["waiting"], out["waiting"]
    assert B_SECRET.strip() not in out["waiting"]

    # A preview of that port opened anyway (get_preview_url does not check): 502, not B's page.
    url = out["url"]
    assert url.startswith(f"{asgi_server}/preview/{mine}/{B_PORT}/?")
    with httpx.Client(follow_redirects=False, timeout=60) as http:
        first = http.get(url)
        assert first.status_code == 302
        for path in ("", "b-secret.txt"):
            answer = http.get(f"{asgi_server}{first.headers['location']}{path}")
            assert answer.status_code == 502, (path, answer.status_code, answer.text)
            assert "secret" not in answer.text and f"port {B_PORT}" in answer.text
        with pytest.raises(InvalidStatus) as closed:
            ws_connect(url.replace("http://", "ws://"), open_timeout=30).close()
        assert closed.value.response.status_code == 403  # nor a websocket to it
        # A's token, or A's session, at B's address: nothing.
        token = first.headers["set-cookie"].split(";")[0]
        at_b = f"{asgi_server}/preview/{theirs}/{B_PORT}/b-secret.txt"
        for cookie in (token, session_cookie(world.alice)):
            answer = http.get(at_b, headers={"Cookie": cookie})
            assert answer.status_code == 404 and "secret" not in answer.text

    # A's own app on the same port number: A's loopback is its own (isolation.py), so it
    # binds, and A's preview shows A's app, B's goes on showing B's.
    async def bind_as_alice() -> str:
        async with mcp(asgi_server, world.keys["alice"]) as client:
            args = {"sandbox_id": mine, "command": f"python3 app.py {B_PORT}", "port": B_PORT}
            return str((await client.call_tool("deploy_app", args)).structured_content["url"])

    with httpx.Client(follow_redirects=True, timeout=60) as http:
        mine_url = run(bind_as_alice())
        hello = http.get(mine_url.replace("/?", "/hello?"))
        assert hello.status_code == 200 and hello.text == "hello from the sandbox\n"
        not_there = http.get(mine_url.replace("/?", "/b-secret.txt?"))
        assert not_there.status_code == 404 and "secret" not in not_there.text
        own = http.get(team_b_app["app"]["url"].replace("/?", "/b-secret.txt?"))
        assert own.status_code == 200 and own.text == B_SECRET
