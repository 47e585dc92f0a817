"""What an app's answer may do to the visitor's browser (issue 24): in path mode its cookies
are its own preview's (the path and the name scoped to it, so no other preview and not the
platform gets them, whatever the browser does); in host mode none reaches past its host;
Clear-Site-Data, Alt-Svc and Service-Worker-Allowed never pass; a redirect that leaves the
preview goes through a page that names the destination.

In-process through the ASGI application, on the in-memory backend with real loopback apps.
The same in Chromium: tests/web/test_browser_preview_cookies.py.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.core.cache import cache

from sandboxes import services
from tests.fakes import FakeBackend
from tests.previews.recorder import RecordingApp, Route, running
from tests.security.preview_asgi import Answer, request, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)  # the proxy's threads must see the rows
DOMAIN = "preview.test"
SETS = Route(
    b"set",
    headers=(
        ("Set-Cookie", "sid=s3cret; Path=/; HttpOnly; SameSite=Lax"),
        ("Set-Cookie", "pref=dark; path=/settings; Domain=testserver"),
        ("Set-Cookie", "sessionid=apps-own; Path=/"),
        ("Clear-Site-Data", '"cookies", "storage"'),
        ("Alt-Svc", 'h3=":443"; ma=86400'),
        ("Service-Worker-Allowed", "/"),
    ),
)
HOST_SETS = Route(b"set", headers=(("Set-Cookie", f"sid=s3cret; Path=/; Domain=.{DOMAIN}"),))
STRIPPED = ("clear-site-data", "alt-svc", "service-worker-allowed")


@dataclass
class Stage:
    mine: str  # alice's sandbox (team A): 8000 and 8001 open
    theirs: str  # bob's (team B): 8000 open
    a: RecordingApp  # port 8000 of every sandbox
    b: RecordingApp  # port 8001
    token: str  # the preview cookie of alice's 8000 (host mode)

    def path(self, sandbox: str, port: int = 8000, rest: str = "") -> str:
        return f"/preview/{sandbox}/{port}/{rest}"


@pytest.fixture
def stage(fake_backend, as_alice, as_bob, alice, monkeypatch) -> Iterator[Stage]:
    routes = {"/set": SETS, "/host-set": HOST_SETS}
    with running(RecordingApp("A", routes)) as a, running(RecordingApp("B", routes)) as b:
        monkeypatch.setattr(FakeBackend, "ports", {8000: a.port, 8001: b.port})
        cache.clear()
        mine, theirs = services.create_sandbox(as_alice).id, services.create_sandbox(as_bob).id
        token = services.get_preview_url(as_alice, mine, 8000).token
        services.get_preview_url(as_alice, mine, 8001)
        services.get_preview_url(as_bob, theirs, 8000)
        yield Stage(mine, theirs, a, b, f"{services.PREVIEW_COOKIE}={token}")


def _pairs(set_cookie: str) -> dict[str, str]:
    """A Set-Cookie's attributes by lower-case name (the cookie itself under "")."""
    first, *attributes = [part.strip() for part in set_cookie.split(";")]
    pairs = {"": first}
    for attribute in attributes:
        name, _, value = attribute.partition("=")
        pairs[name.lower()] = value
    return pairs


def test_path_mode_scopes_an_apps_cookies_to_its_own_preview(stage, alice, bob):
    session = session_cookie(alice)
    answer = request(stage.path(stage.mine, rest="set"), headers={"cookie": session})
    assert answer.status == 200
    cookies = [_pairs(value) for value in answer.all("set-cookie")]
    assert len(cookies) == 3  # the app's own `sessionid` too: scoped, it is harmless
    prefix = stage.path(stage.mine).rstrip("/")
    assert [c["path"] for c in cookies] == [f"{prefix}/", f"{prefix}/settings", f"{prefix}/"]
    assert all("domain" not in c for c in cookies)
    assert "httponly" in cookies[0] and cookies[0]["samesite"] == "Lax"
    scoped = [c[""] for c in cookies]
    assert all(not c.startswith(("sid=", "pref=", "sessionid=")) for c in scoped), scoped
    assert scoped[0].endswith("_sid=s3cret")
    jar = "; ".join([*scoped, session, "csrftoken=platform", "legacy=unscoped"])

    # Back to the same preview: its own cookies, unscoped; nothing else.
    request(stage.path(stage.mine, rest="echo"), headers={"cookie": jar})
    assert stage.a.seen[-1].cookie == "sid=s3cret; pref=dark; sessionid=apps-own"
    # Another port of the same sandbox, another team's preview: none of them.
    request(stage.path(stage.mine, 8001, "echo"), headers={"cookie": jar})
    assert stage.b.seen[-1].cookie == ""
    bobs = jar.replace(session, session_cookie(bob))  # the same jar, bob signed in
    theirs = request(stage.path(stage.theirs, rest="echo"), headers={"cookie": bobs})
    assert theirs.status == 200
    assert stage.a.seen[-1].path == "/echo" and stage.a.seen[-1].cookie == ""


def test_host_mode_drops_the_domain_of_an_apps_cookie(stage, settings):
    settings.SANDHUB_PREVIEW_DOMAIN = DOMAIN
    host = f"8000-{stage.mine.replace('_', '-')}.{DOMAIN}"
    link = stage.token
    answer = request("/host-set", host=host, headers={"cookie": link})
    assert answer.status == 200
    assert answer.all("set-cookie") == ["sid=s3cret; Path=/"]
    request("/echo", host=host, headers={"cookie": f"{link}; sid=s3cret; sessionid=platform"})
    assert stage.a.seen[-1].cookie == "sid=s3cret"  # host mode: the names are the app's own


@pytest.mark.parametrize("mode", ["path", "host"])
def test_headers_that_reach_past_the_app_are_stripped(stage, alice, settings, mode):
    if mode == "host":
        settings.SANDHUB_PREVIEW_DOMAIN = DOMAIN
        host = f"8000-{stage.mine.replace('_', '-')}.{DOMAIN}"
        answer = request("/set", host=host, headers={"cookie": stage.token})
    else:
        answer = request(
            stage.path(stage.mine, rest="set"), headers={"cookie": session_cookie(alice)}
        )
    assert answer.status == 200 and answer.body == b"set"
    assert [name for name, _ in answer.headers if name.decode() in STRIPPED] == []


# --- redirects ----------------------------------------------------------------------------


def _redirecting(stage: Stage, location: str) -> None:
    stage.a.routes["/go/there"] = Route(b"", status=302, headers=(("Location", location),))


def _is_the_page(answer: Answer, destination: str | None) -> None:
    assert answer.status == 200, answer
    assert answer.header("location") is None
    assert answer.header("content-type") == "text/html; charset=utf-8"
    csp = answer.header("content-security-policy") or ""
    assert "default-src 'none'" in csp and "sandbox" in csp
    assert answer.header("referrer-policy") == "no-referrer"
    page = answer.body.decode()
    assert "<script" not in page.lower()
    if destination is not None:
        assert f'href="{html.escape(destination, quote=True)}"' in page
    else:
        assert "href=" not in page  # a javascript: or data: destination is named, not linked


OFF_SITE_PATH = {
    "//evil.example/steal": "http://evil.example/steal",
    "http://evil.example/": "http://evil.example/",
    "https://evil.example/x?y=1": "https://evil.example/x?y=1",
    "/\\evil.example/": "http://evil.example/",
    "../../../../admin/": "http://testserver/admin/",
    "/../../../admin/": "http://testserver/admin/",
    "/%2e%2e/%2E%2e/%2e%2e/admin/": "http://testserver/admin/",
    "http://testserver/admin/": "http://testserver/admin/",
    "http://localhost:9999/": "http://localhost:9999/",
    "javascript:alert(document.domain)": None,
}


@pytest.mark.parametrize("location", OFF_SITE_PATH.keys())
def test_path_mode_redirects_off_the_preview_go_through_a_page(stage, alice, location):
    _redirecting(stage, location)
    answer = request(
        stage.path(stage.mine, rest="go/there"), headers={"cookie": session_cookie(alice)}
    )
    _is_the_page(answer, OFF_SITE_PATH[location])


IN_PATH = {
    "/next": "/next",
    "http://localhost:8000/next?a=1": "/next?a=1",
    "next": "next",
    "../next": "../next",
    "?page=2": "?page=2",
    "http://testserver/preview/SB/8000/x": "http://testserver/preview/SB/8000/x",
}


@pytest.mark.parametrize("location", IN_PATH.keys())
def test_path_mode_redirects_within_the_preview_stay_redirects(stage, alice, location):
    _redirecting(stage, location.replace("SB", stage.mine))
    answer = request(
        stage.path(stage.mine, rest="go/there"), headers={"cookie": session_cookie(alice)}
    )
    assert answer.status == 302
    expected = IN_PATH[location].replace("SB", stage.mine)
    if expected.startswith("/"):
        expected = stage.path(stage.mine).rstrip("/") + expected
    assert answer.header("location") == expected


@pytest.mark.parametrize(
    ("location", "kept"),
    [
        ("//evil.example/", None),
        ("http://8000-sb-other.preview.test/", None),
        ("http://localhost:8000/next", "/next"),
        ("/next", "/next"),
        ("http://HOST/next", "http://HOST/next"),
    ],
)
def test_host_mode_redirects_off_the_host_go_through_a_page(stage, settings, location, kept):
    settings.SANDHUB_PREVIEW_DOMAIN = DOMAIN
    host = f"8000-{stage.mine.replace('_', '-')}.{DOMAIN}"
    _redirecting(stage, location.replace("HOST", host))
    answer = request("/go/there", host=host, headers={"cookie": stage.token})
    if kept is None:
        _is_the_page(answer, location if location.startswith("http") else "http:" + location)
    else:
        assert answer.status == 302
        assert answer.header("location") == kept.replace("HOST", host)


def test_the_page_escapes_what_it_names(stage, alice):
    _redirecting(stage, 'https://evil.example/"><script>alert(1)</script>')
    answer = request(
        stage.path(stage.mine, rest="go/there"), headers={"cookie": session_cookie(alice)}
    )
    assert answer.status == 200
    assert b"<script>" not in answer.body and b"&lt;script&gt;" in answer.body
