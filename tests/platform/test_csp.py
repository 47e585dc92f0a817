"""Issue 24: platform pages sent no Content-Security-Policy. Every response of the Django app
(team pages, admin, the REST API and its docs) now carries one without inline script or
style (platform_site/csp.py), and no template has an inline script, an inline event handler
or an inline style left for it to block. tests/web/test_browser_csp.py checks the pages in
Chromium under it."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.test import Client

from tenants import apikeys

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
REQUIRED = {
    "default-src": {"'self'"},
    "script-src": {"'self'"},
    "style-src": {"'self'"},
    "object-src": {"'none'"},
    "base-uri": {"'self'"},
    "frame-ancestors": {"'none'"},
    "form-action": {"'self'"},
}


# --- the templates ---------------------------------------------------------------------------

# Django's own syntax, out of the way of the HTML parser: comments (with what they say),
# tags, and variables (which stand for a value).
DJANGO_SYNTAX = [
    (re.compile(r"{%\s*comment\s*%}.*?{%\s*endcomment\s*%}", re.S), " "),
    (re.compile(r"{#.*?#}"), " "),  # one line only, as Django reads them
    (re.compile(r"{%.*?%}", re.S), " "),
    (re.compile(r"{{.*?}}", re.S), "value"),
]


class InlineCode(HTMLParser):
    """What a policy without 'unsafe-inline' blocks: <script> without src (JSON data
    blocks are not run), on*= handlers, <style> elements and style= attributes; and what
    htmx would run through eval, which its config turns off (hx-on, js: values)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        line = self.getpos()[0]
        if tag == "script" and "src" not in named and named.get("type") != "application/json":
            self.found.append(f"line {line}: an inline <script>")
        if tag == "style":
            self.found.append(f"line {line}: a <style> element")
        for name, value in attrs:
            script_value = (value or "").strip().lower().startswith(("js:", "javascript:"))
            if name.startswith(("on", "hx-on")) or name == "style" or script_value:
                self.found.append(f"line {line}: <{tag} {name}=...>")


def inline_code(source: str) -> list[str]:
    for pattern, replacement in DJANGO_SYNTAX:
        # Keep the line count: a multi-line tag or comment becomes as many blank lines.
        source = pattern.sub(lambda m, r=replacement: r + "\n" * m.group().count("\n"), source)
    parser = InlineCode()
    parser.feed(source)
    parser.close()
    return parser.found


def test_the_walker_sees_each_kind_of_inline_code():
    data = '<script src="a.js"></script><script type="application/json">{"a": 1}</script>'
    assert inline_code(data) == []
    assert inline_code("{% comment %}<script>x()</script>{% endcomment %}<b>{{ onload }}</b>") == []
    found = inline_code(
        '<script>x()</script>\n<form onsubmit="return confirm(1)">'
        '<span style="width: {{ p }}%"></span><style>a {}</style>\n'
        '<a href="javascript:x()" hx-on:click="x()" hx-vals="js:{a: x()}">'
    )
    assert found == [
        "line 1: an inline <script>",
        "line 2: <form onsubmit=...>",
        "line 2: <span style=...>",
        "line 2: a <style> element",
        "line 3: <a href=...>",
        "line 3: <a hx-on:click=...>",
        "line 3: <a hx-vals=...>",
    ]


def test_no_template_has_inline_script_handlers_or_style():
    found = {
        str(path.relative_to(ROOT)): inline_code(path.read_text())
        for path in sorted(TEMPLATES.rglob("*.html"))
    }
    assert {path: lines for path, lines in found.items() if lines} == {}
    assert len(found) > 30  # the walk found the templates


# --- the header on every kind of response ----------------------------------------------------


def policy_of(response) -> dict[str, set[str]]:
    header = response.headers.get("Content-Security-Policy")
    assert header, f"{response.request['PATH_INFO']} answered without a policy"
    directives = [part.split() for part in header.split(";") if part.strip()]
    return {name: set(values) for name, *values in directives}


def assert_strict(response) -> None:
    policy = policy_of(response)
    for name, values in REQUIRED.items():
        assert policy.get(name) == values, (response.request["PATH_INFO"], name, policy)
    assert "'unsafe-inline'" not in str(policy) and "'unsafe-eval'" not in str(policy)


@pytest.fixture
def admin_alice(alice):
    alice.is_staff = alice.is_superuser = True
    alice.save()
    return alice


@pytest.fixture
def browser(admin_alice) -> Client:
    client = Client()
    client.force_login(admin_alice)
    return client


@pytest.mark.parametrize(
    "path",
    ["/", "/hosts/", "/keys/", "/team/", "/team/audit/", "/team/commands/", "/no-such-page/"],
)
def test_team_pages_carry_the_policy(browser, path):
    assert_strict(browser.get(path))


def test_signed_out_pages_and_refusals_carry_the_policy(db):
    client = Client(enforce_csrf_checks=True)
    assert_strict(client.get("/login/"))
    assert_strict(client.get("/"))  # the redirect to the login page
    refused = client.post("/login/", {"username": "x", "password": "y"})  # no CSRF token
    assert refused.status_code == 403
    assert_strict(refused)


@pytest.mark.parametrize(
    "path", ["/admin/", "/admin/sandboxes/sandbox/", "/admin/tenants/team/{team}/change/"]
)
def test_admin_pages_carry_the_policy(browser, team_a, path):
    response = browser.get(path.format(team=team_a.pk))
    assert response.status_code == 200
    assert_strict(response)


def test_the_rest_api_and_its_docs_carry_the_policy(alice, team_a):
    key = apikeys.create_key(alice, team_a, name="csp", scopes="read").plaintext
    client = Client(headers={"Authorization": f"Bearer {key}"})
    assert_strict(client.get("/api/v1/sandboxes/"))
    assert_strict(Client().get("/api/v1/sandboxes/"))  # 401
    assert_strict(client.get("/api/schema/"))
    docs = client.get("/api/docs/")
    assert_strict(docs)
    # The docs' init script is a URL of its own (no inline script for the policy to block).
    script = re.findall(r'<script src="([^"]+)"', docs.content.decode())
    assert any("script" in src.split("?", 1)[-1] for src in script), script
    init = client.get(next(src for src in script if "?" in src))
    assert init.status_code == 200 and init["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in init.content
