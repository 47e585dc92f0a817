"""The preview proxy as a hostile tenant or a stranger sees it: every wrong address,
credential or host name is the same 404, and never reaches a sandbox's port.

Driven in-process through the ASGI application (platform_site.asgi) on the in-memory backend,
whose port 8000 is a real loopback HTTP server that records what reaches it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import Client as DjangoClient

from platform_site.asgi import application
from sandboxes import services
from sandboxes.proxy.forward import request_framing
from tests.fakes import FakeBackend

pytestmark = pytest.mark.django_db(transaction=True)  # the proxy's threads must see the rows
PAGE = b"the app's own page\n"


class _App(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def app(fake_backend, monkeypatch) -> Iterator[list[str]]:
    """Port 8000 and 8001 of every fake sandbox answer; the paths that reached them."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _App)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setattr(_App, "hits", [])
    monkeypatch.setattr(
        FakeBackend, "ports", {8000: server.server_address[1], 8001: server.server_address[1]}
    )
    cache.clear()
    yield _App.hits
    server.shutdown()
    server.server_close()
    thread.join(5)


def get(path: str, **options: str) -> tuple[int, bytes]:
    """(status, body) of one GET through the ASGI application."""
    sent = get_full(path, **options)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


def get_full(
    path: str, *, host: str = "testserver", cookie: str = "", query: str = ""
) -> list[dict[str, Any]]:
    """Every ASGI message the application sent for one GET."""
    headers = [(b"host", host.encode())]
    if cookie:
        headers.append((b"cookie", cookie.encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []

    async def conversation() -> None:
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.Event().wait()  # the browser stays until the answer is complete
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await application(scope, receive, send)

    asyncio.run(conversation())
    return sent


def session_of(user) -> str:
    client = DjangoClient()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


@pytest.fixture
def previews(app, as_alice, as_bob) -> dict[str, Any]:
    mine = services.create_sandbox(as_alice).id
    theirs = services.create_sandbox(as_bob).id
    return {
        "mine": mine,
        "theirs": theirs,
        "mine_8000": services.get_preview_url(as_alice, mine, 8000).token,
        "mine_8001": services.get_preview_url(as_alice, mine, 8001).token,
        "theirs_8000": services.get_preview_url(as_bob, theirs, 8000).token,
    }


def test_the_right_token_opens_and_nothing_else_does(previews, app, alice, bob):
    mine, theirs = previews["mine"], previews["theirs"]
    token = f"sandhub_preview={previews['mine_8000']}"
    assert get(f"/preview/{mine}/8000/x", cookie=token) == (200, PAGE)
    refused = [
        get(f"/preview/{mine}/8000/x"),  # no credentials
        get(f"/preview/{mine}/8001/x", cookie=token),  # another port's preview
        get(f"/preview/{theirs}/8000/x", cookie=token),  # another team's sandbox
        get(f"/preview/{mine}/8000/x", cookie=f"sandhub_preview={previews['theirs_8000']}"),
        get(
            f"/preview/{mine}/8000/x", cookie=token.replace("sandhub_preview=", "sandhub_preview=x")
        ),
        get(f"/preview/{mine}/8000/x", cookie=session_of(bob)),  # another team's member
        get(f"/preview/{theirs}/8000/x", cookie=session_of(alice)),
        get(f"/preview/{mine}/8002/x", cookie=session_of(alice)),  # no open preview there
    ]
    assert all(answer == (404, b"not found\n") for answer in refused), refused
    assert app == ["/x"]  # only the one good request reached the app


@pytest.mark.parametrize(
    "path",
    [
        "/preview/",
        "/preview/../../admin/",
        "/preview/sb_nope/8000/",
        "/preview/sb_nope/99999/",
        "/preview/sb_nope/abc/",
        "/preview/%2e%2e/8000/",
        "/preview/sb_nope/0/",
    ],
)
def test_malformed_addresses_are_not_found(previews, app, alice, path):
    assert get(path, cookie=session_of(alice))[0] == 404
    assert app == []


def test_host_names_outside_the_preview_domain_never_reach_a_sandbox(
    previews, app, settings, alice
):
    settings.SANDHUB_PREVIEW_DOMAIN = "localhost"
    label = f"8000-{previews['mine'].replace('_', '-')}"
    token = f"sandhub_preview={previews['mine_8000']}"
    assert get("/x", host=f"{label}.localhost:8000", cookie=token) == (200, PAGE)
    for host in (f"evil.{label}.localhost", f"9-{label}.localhost", "8000-sb-nope.localhost"):
        assert get("/x", host=host, cookie=token)[0] == 404, host
    # A look-alike domain is not a preview host: it goes to the platform, which refuses it.
    status, body = get("/x", host=f"{label}.localhost.evil.example", cookie=token)
    assert status == 400 and PAGE not in body
    assert app == ["/x"]


def test_a_body_with_both_framings_reaches_the_app_chunked():
    both = {"headers": [(b"content-length", b"5"), (b"transfer-encoding", b"chunked")]}
    assert request_framing(both) == [(b"transfer-encoding", b"chunked")]
    assert request_framing({"headers": [(b"content-length", b"5")]}) == [(b"content-length", b"5")]
    assert request_framing({"headers": []}) == []


def test_a_members_session_with_a_link_is_redirected_without_a_cookie(previews, app, alice):
    """The session let the request in: the link's token is dropped from the address, and no
    cookie is made of a grant that carries no token."""
    mine = previews["mine"]
    sent = get_full(
        f"/preview/{mine}/8000/x", cookie=session_of(alice), query="sandhub_token=junk&a=1"
    )
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = dict(start["headers"])
    assert start["status"] == 302
    assert headers[b"location"] == f"/preview/{mine}/8000/x?a=1".encode()
    assert b"set-cookie" not in headers
