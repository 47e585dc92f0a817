"""Issue 24's preview findings in a real Chromium against the live server (uvicorn serving
platform_site.asgi), names mapped to loopback (--host-resolver-rules; *.localhost resolves
there by itself), sandboxes on the in-memory backend whose ports are real loopback apps
(tests/previews/recorder.py: HTTP and websockets, recording what reached them).

- Host mode, a victim of team A holding A's preview cookie opens team B's public preview,
  whose page tries `new WebSocket(<A's preview>)` and `fetch(<A's preview>, {credentials:
  'include'})`: neither reads A's app (A's app answers any origin with CORS, credentials
  included, as a lax development server does). With *.preview.test (http, not a trustworthy
  origin: Chromium sends no Sec-Fetch-* there) the Origin header decides; with
  *.preview.localhost, Sec-Fetch-Site.
- Cookie isolation: an app's `sid=...; Path=/` (path mode) or `Domain=<parent>` (host mode)
  reaches neither another team's preview nor the platform's pages.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client as DjangoClient

from hosts.backends import reset_backends
from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import Channel, Membership, Role
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.previews.recorder import RecordingApp, Route, Seen, running
from tests.web.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.web.helpers import off_loop

pytestmark = pytest.mark.browser
MAPPED = "MAP *.preview.test 127.0.0.1, MAP sandhub.test 127.0.0.1, MAP *.sandhub.test 127.0.0.1"
SECRET = "team A's private data"
ATTACK = """<!doctype html><title>B</title><pre id=out>running</pre><script>
(async () => {
  const target = TARGET, out = {};
  out.ws = await new Promise(done => {
    const ws = new WebSocket(target.replace(/^http/, 'ws'));
    ws.onmessage = e => { done('read: ' + e.data); ws.close(); };
    ws.onerror = () => done('error');
    ws.onclose = e => done('closed ' + e.code);
  });
  try {
    const answer = await fetch(target, {credentials: 'include'});
    out.fetch = 'read: ' + answer.status + ' ' + await answer.text();
  } catch (e) { out.fetch = 'error: ' + e; }
  out.own = await (await fetch('/own')).text();  // its own origin: as before
  document.getElementById('out').textContent = JSON.stringify(out);
  window.outcome = out;
})();
</script>"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium with the test names mapped to loopback (the module's own: the shared one
    has no mapping)."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[*CHROMIUM_ARGS, f"--host-resolver-rules={MAPPED}"],
        )
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Stage:
    server: str  # the platform, as the test's browser addresses it
    port: int  # the live server's
    a: str  # team A's sandbox: port 8000 is app A (private)
    b: str  # team B's: port 8001 is app B (public)
    app_a: RecordingApp
    app_b: RecordingApp
    link_a: str  # a token for A's 8000 (a member handed it to the victim)
    session_a: str  # the victim's session on the platform (alice, member of A)

    def host(self, sandbox: str, port: int, domain: str) -> str:
        return f"{port}-{sandbox.replace('_', '-')}.{domain}:{self.port}"


def _make(world: Any) -> tuple[str, str, str, str]:
    owner_b = get_user_model().objects.get_or_create(username="bella")[0]
    Membership.objects.get_or_create(user=owner_b, team=world.team_b, role=Role.OWNER)
    world.team_b.allow_public_previews = True
    world.team_b.save()
    alice = world.principal()
    bella = Principal(user=owner_b, team=world.team_b, channel=Channel.WEB)
    a, b = services.create_sandbox(alice).id, services.create_sandbox(bella).id
    token = services.get_preview_url(alice, a, 8000).token
    services.get_preview_url(bella, b, 8001, public=True)
    client = DjangoClient()
    client.force_login(world.alice)
    return a, b, token, client.cookies["sessionid"].value


def _unmake() -> None:
    for row in Sandbox.objects.exclude(status="deleted"):
        services.delete_sandbox(Principal.system(), row.public_id)


@pytest.fixture
def stage(asgi_server, world, browser, settings, monkeypatch) -> Iterator[Stage]:
    settings.SANDHUB_BACKENDS = {"docker": "tests.fakes.FakeBackend"}
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "sandhub.test"]
    reset_backends()
    monkeypatch.setattr(FakeBackend, "sandboxes", {})  # put back after, as the ports
    secret = Route(SECRET.encode(), content_type="text/plain")
    with (
        running(RecordingApp("A", {"/": secret}, reflect_cors=True)) as app_a,
        running(RecordingApp("B")) as app_b,
    ):
        monkeypatch.setattr(FakeBackend, "ports", {8000: app_a.port, 8001: app_b.port})
        a, b, token, session = off_loop(_make, world)
        port = urlsplit(asgi_server).port or 80
        try:
            yield Stage(asgi_server, port, a, b, app_a, app_b, token, session)
        finally:
            off_loop(_unmake)
            reset_backends()


@pytest.mark.parametrize("domain", ["preview.test", "preview.localhost"])
def test_another_tenants_page_cannot_use_the_victims_preview_cookie(
    stage, browser, settings, domain
):
    settings.SANDHUB_PREVIEW_DOMAIN = domain
    own_a = f"http://{stage.host(stage.a, 8000, domain)}/"
    origin_b = f"http://{stage.host(stage.b, 8001, domain)}"
    stage.app_b.routes["/"] = Route(ATTACK.replace("TARGET", repr(own_a)).encode())
    context = browser.new_context()
    context.set_default_timeout(20_000)
    victim = context.new_page()
    # The victim opens A's preview with the link a teammate sent: the cookie is set.
    victim.goto(f"{own_a}?{services.PREVIEW_TOKEN_PARAM}={stage.link_a}")
    assert victim.inner_text("body") == SECRET
    assert [c["name"] for c in context.cookies(own_a)] == [services.PREVIEW_COOKIE]

    # Then B's public preview, in the same browser.
    victim.goto(f"{origin_b}/")
    victim.wait_for_function("window.outcome")
    outcome = victim.evaluate("window.outcome")
    assert SECRET not in outcome["fetch"] and outcome["fetch"].startswith("error"), outcome
    assert not outcome["ws"].startswith("read"), outcome
    assert outcome["own"] == "app B\n"  # a preview's own requests are as before
    assert [s.path for s in stage.app_a.seen if s.headers.get("origin") == origin_b] == []
    context.close()


def last_to(app: RecordingApp, path: str) -> Seen:
    """The last request for `path`: Chromium asks for /favicon.ico by itself after a page
    loads, at a moment of its own choosing, so the last request recorded may be that one."""
    matching = [seen for seen in app.seen if seen.path == path]
    assert matching, app.paths()
    return matching[-1]


def test_path_mode_an_apps_cookie_is_its_own_previews(stage, browser, settings):
    settings.SANDHUB_PREVIEW_DOMAIN = ""
    stage.app_a.routes["/set"] = Route(b"set", headers=(("Set-Cookie", "sid=a-secret; Path=/"),))
    context = browser.new_context()
    host = urlsplit(stage.server).hostname
    context.add_cookies(
        [{"name": "sessionid", "value": stage.session_a, "domain": host, "path": "/"}]
    )
    page = context.new_page()
    a_base = f"{stage.server}/preview/{stage.a}/8000"
    assert page.goto(f"{a_base}/set").status == 200
    page.goto(f"{a_base}/echo")
    assert last_to(stage.app_a, "/echo").cookie == "sid=a-secret"  # its own, its own name

    page.goto(f"{stage.server}/preview/{stage.b}/8001/echo")  # team B's public preview
    last_to(stage.app_b, "/echo")
    assert [s.path for s in stage.app_b.seen if "a-secret" in s.cookie] == []
    with page.expect_request(lambda request: request.url.endswith("/login/")) as sent:
        page.goto(f"{stage.server}/login/")
    assert "a-secret" not in (sent.value.all_headers().get("cookie") or "")
    assert [c for c in context.cookies(f"{stage.server}/") if c["value"] == "a-secret"] == []
    context.close()


def test_host_mode_an_apps_cookie_stays_on_its_host(stage, browser, settings):
    domain = "preview.sandhub.test"  # previews on the platform's own site: the worst case
    settings.SANDHUB_PREVIEW_DOMAIN = domain
    parent = Route(b"set", headers=(("Set-Cookie", "sid=a-secret; Path=/; Domain=sandhub.test"),))
    stage.app_a.routes["/set"] = parent
    context = browser.new_context()
    page = context.new_page()
    own_a = f"http://{stage.host(stage.a, 8000, domain)}"
    page.goto(f"{own_a}/set?{services.PREVIEW_TOKEN_PARAM}={stage.link_a}")
    page.goto(f"{own_a}/echo")
    assert "sid=a-secret" in last_to(stage.app_a, "/echo").cookie.split("; ")

    page.goto(f"http://{stage.host(stage.b, 8001, domain)}/echo")
    last_to(stage.app_b, "/echo")
    assert [s.path for s in stage.app_b.seen if "a-secret" in s.cookie] == []
    platform = f"http://sandhub.test:{stage.port}"
    with page.expect_request(lambda request: request.url.endswith("/login/")) as sent:
        page.goto(f"{platform}/login/")
    assert "a-secret" not in (sent.value.all_headers().get("cookie") or "")
    assert [c for c in context.cookies(f"{platform}/") if c["value"] == "a-secret"] == []
    context.close()
