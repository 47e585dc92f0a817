"""A preview trusts only itself (issue 24): a request that carries cookies, and every
websocket, coming from another origin is refused before authorization. The rule is Fetch
Metadata's resource isolation (sandboxes/proxy/origins.py), case by case, in-process through
the ASGI application on the in-memory backend with a real loopback app.

The whole attack in a real browser: tests/web/test_browser_preview_cookies.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.core.cache import cache

from sandboxes import services
from tests.fakes import FakeBackend
from tests.previews.recorder import RecordingApp, running
from tests.security.preview_asgi import request, session_cookie, websocket

pytestmark = pytest.mark.django_db(transaction=True)  # the proxy's threads must see the rows
DOMAIN = "preview.test"
NAVIGATE = {"sec-fetch-mode": "navigate", "sec-fetch-dest": "document"}


@dataclass(frozen=True)
class Preview:
    sandbox_id: str
    host: str  # its host name in host mode
    cookie: str  # the victim's preview cookie

    @property
    def origin(self) -> str:
        return f"http://{self.host}"


@pytest.fixture
def app(fake_backend, monkeypatch) -> Iterator[RecordingApp]:
    with running(RecordingApp("A")) as app:
        monkeypatch.setattr(FakeBackend, "ports", {8000: app.port})
        cache.clear()
        yield app


@pytest.fixture
def preview(app, as_alice, settings) -> Preview:
    settings.SANDHUB_PREVIEW_DOMAIN = DOMAIN
    sandbox_id = services.create_sandbox(as_alice).id
    token = services.get_preview_url(as_alice, sandbox_id, 8000).token
    host = f"8000-{sandbox_id.replace('_', '-')}.{DOMAIN}"
    return Preview(sandbox_id, host, f"{services.PREVIEW_COOKIE}={token}")


@pytest.fixture
def no_authorization(monkeypatch) -> list[str]:
    """The services' preview authorization, counted: a refusal must come before it."""
    calls: list[str] = []
    for name in ("authorize_preview", "open_preview"):
        original = getattr(services, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(services, name, counted)
    return calls


OTHER = "http://8001-sb-other.preview.test"
PASSING = {
    "no fetch metadata, no origin (not a browser)": {},
    "same-origin": {"sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"},
    "typed in the address bar": {"sec-fetch-site": "none", **NAVIGATE},
    "a link from a sibling": {"sec-fetch-site": "same-site", **NAVIGATE},
    "a link from anywhere": {"sec-fetch-site": "cross-site", **NAVIGATE},
    "its own origin, no fetch metadata": {"origin": "OWN"},
}
REFUSED = {
    "a sibling's fetch": {"sec-fetch-site": "same-site", "sec-fetch-mode": "cors"},
    "a sibling's image": {"sec-fetch-site": "same-site", "sec-fetch-mode": "no-cors"},
    "a frame elsewhere": {
        "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "navigate",
        "sec-fetch-dest": "iframe",
    },
    "an unknown site value": {"sec-fetch-site": "somewhere", **NAVIGATE},
    "another origin, no fetch metadata": {"origin": OTHER},
    "an opaque origin": {"origin": "null"},
    "its host over another scheme": {"origin": "https://OWNHOST"},
}


def _headers(given: dict[str, str], preview: Preview, cookie: str | None) -> dict[str, str]:
    headers = {
        k: v.replace("OWNHOST", preview.host).replace("OWN", preview.origin)
        for k, v in given.items()
    }
    if cookie:
        headers["cookie"] = cookie
    return headers


@pytest.mark.parametrize("given", PASSING.values(), ids=PASSING.keys())
def test_requests_from_its_own_origin_or_a_navigation_pass(preview, app, given):
    answer = request("/", host=preview.host, headers=_headers(given, preview, preview.cookie))
    assert answer.status == 200 and answer.body == b"app A\n"
    assert app.paths() == ["/"]


@pytest.mark.parametrize("given", REFUSED.values(), ids=REFUSED.keys())
def test_cookie_carrying_requests_from_elsewhere_are_refused_before_authorization(
    preview, app, given, no_authorization
):
    answer = request("/", host=preview.host, headers=_headers(given, preview, preview.cookie))
    assert answer.status == 403
    assert b"another origin" in answer.body and len(answer.body) < 200
    assert answer.header("content-type") == "text/plain; charset=utf-8"
    assert app.seen == [] and no_authorization == []


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_a_navigation_from_elsewhere_passes_only_as_get_or_head(preview, app, method):
    given = {"sec-fetch-site": "cross-site", **NAVIGATE}
    headers = _headers(given, preview, preview.cookie)
    assert request("/", host=preview.host, method=method, headers=headers).status == 403
    assert request("/", host=preview.host, method="HEAD", headers=headers).status != 403
    assert app.paths() == ["/"]  # the HEAD


def test_without_cookies_a_request_from_elsewhere_is_not_the_rules_business(preview, app):
    """No cookie, no victim: the request is authorized as any other (a private preview
    without credentials is the usual 404)."""
    answer = request("/", host=preview.host, headers={"sec-fetch-site": "cross-site"})
    assert answer.status == 404


# --- websockets: every upgrade is checked, cookie or not -------------------------------------


@pytest.fixture
def public(preview, as_alice, team_a) -> Preview:
    """The preview open to anyone: a websocket needs no cookie to get in."""
    team_a.allow_public_previews = True
    team_a.save()
    services.get_preview_url(as_alice, preview.sandbox_id, 8000, public=True)
    return preview


@pytest.mark.parametrize("cookie", [True, False], ids=["with-cookie", "public-without"])
@pytest.mark.parametrize("given", REFUSED.values(), ids=REFUSED.keys())
def test_a_websocket_from_elsewhere_is_closed_before_accepting(
    public, app, given, cookie, no_authorization
):
    preview = public
    headers = _headers(given, preview, preview.cookie if cookie else None)
    socket = websocket("/", host=preview.host, headers=headers)
    assert not socket.accepted and socket.messages == []
    assert app.seen == [] and no_authorization == []


def test_a_websocket_from_a_sibling_is_closed_even_as_a_navigation(preview, app):
    for site in ("same-site", "cross-site"):
        given = {"sec-fetch-site": site, **NAVIGATE}
        socket = websocket("/", host=preview.host, headers=_headers(given, preview, preview.cookie))
        assert not socket.accepted
    assert app.seen == []


@pytest.mark.parametrize(
    "given",
    [{"origin": "OWN"}, {"sec-fetch-site": "same-origin", "origin": "OWN"}, {}],
    ids=["its-own-origin", "same-origin", "not-a-browser"],
)
def test_a_websocket_from_its_own_origin_is_bridged(preview, app, given):
    headers = _headers(given, preview, preview.cookie)
    socket = websocket("/", host=preview.host, headers=headers, say="hi")
    assert socket.accepted
    assert socket.messages == ["hello from A", "A echoes hi"]


# --- path mode: the preview's own origin is the platform's -----------------------------------


@pytest.fixture
def in_path_mode(preview, settings) -> str:
    settings.SANDHUB_PREVIEW_DOMAIN = ""
    return f"/preview/{preview.sandbox_id}/8000/"


def test_path_mode_trusts_the_platforms_origin_and_nothing_else(in_path_mode, app, alice):
    session = session_cookie(alice)
    own = {"origin": "http://testserver", "cookie": session}
    assert request(in_path_mode, headers=own).status == 200
    # A page of a path-mode preview is an opaque origin (the CSP sandbox): what it asks for
    # with cookies is refused, and its websockets too.
    subresource = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors", "cookie": session}
    assert request(in_path_mode, headers=subresource).status == 403
    assert not websocket(in_path_mode, headers={"origin": "null", "cookie": session}).accepted
    assert not websocket(in_path_mode, headers={"origin": "null"}).accepted
    assert websocket(
        in_path_mode, headers={"origin": "http://testserver", "cookie": session}
    ).accepted
    assert app.paths() == ["/", "/"]
