"""Issue 26's page fixes in a real Chromium against the live server (uvicorn serving
platform_site.asgi), sandboxes on the in-memory backend: the runner's live stream shows
terminal colours (static/web/ansi.js), an invalid form's errors come into view and get the
focus, "Copy link" makes the link and copies it in one click, and a preview of a port where
nothing listens gets a styled page that keeps to its Content-Security-Policy."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client as DjangoClient

from hosts.backends import reset_backends
from sandboxes import services
from sandboxes.models import Sandbox
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.web.helpers import off_loop

pytestmark = pytest.mark.browser

IN_VIEW = """el => {
  const box = el.getBoundingClientRect();
  return box.top >= 0 && box.top < window.innerHeight && box.bottom > 0;
}"""


@dataclass
class Stage:
    server: str
    sandbox: str
    session: str

    def page(self, browser: Any, **options: Any) -> Any:
        context = browser.new_context(**options)
        context.set_default_timeout(20_000)
        context.add_cookies([{"name": "sessionid", "value": self.session, "url": self.server}])
        return context.new_page()


def _make(world: Any) -> tuple[str, str]:
    sandbox = services.create_sandbox(world.principal(), name="colours").id
    services.write_file(world.principal(), sandbox, "a.txt", "hello\n")
    client = DjangoClient()
    client.force_login(world.alice)
    return sandbox, client.cookies["sessionid"].value


def _unmake() -> None:
    for row in Sandbox.objects.exclude(status="deleted"):
        services.delete_sandbox(Principal.system(), row.public_id)


def _printf_too(monkeypatch: Any) -> None:
    """The fake backend learns `printf FORMAT` (escapes like \\033 interpreted, as bash's)."""
    original = FakeBackend._interpret

    def interpret(self, box, argv, env, timeout):
        if argv[:2] == ["bash", "-c"] and argv[2].startswith("printf "):
            text = shlex.split(argv[2])[1].encode().decode("unicode_escape")
            return text.encode(), b"", 0, False
        return original(self, box, argv, env, timeout)

    monkeypatch.setattr(FakeBackend, "_interpret", interpret)


@pytest.fixture
def stage(asgi_server, world, settings, monkeypatch) -> Iterator[Stage]:
    settings.SANDHUB_BACKENDS = {"docker": "tests.fakes.FakeBackend"}
    settings.SANDHUB_PREVIEW_DOMAIN = ""
    reset_backends()
    monkeypatch.setattr(FakeBackend, "sandboxes", {})
    monkeypatch.setattr(FakeBackend, "ports", {})
    _printf_too(monkeypatch)
    sandbox, session = off_loop(_make, world)
    try:
        yield Stage(asgi_server, sandbox, session)
    finally:
        off_loop(_unmake)
        reset_backends()


# --- 1. terminal colours in the live stream --------------------------------------------------


def test_the_live_stream_shows_colours_not_escape_codes(stage, chromium):
    page = stage.page(chromium)
    page.goto(f"{stage.server}/sandboxes/{stage.sandbox}/")
    page.fill("#run-form textarea[name=command]", r"printf '\033[31mred\033[0m plain\n'")
    page.click("#run-submit")
    red = page.locator("#run-output span.ansi-fg-1")
    red.wait_for()
    assert red.inner_text() == "red"
    page.locator("#run-link:not([hidden])").wait_for()
    shown = page.inner_text("#run-output")
    assert shown.startswith("red plain") and "[31m" not in shown and "\x1b" not in shown
    assert page.evaluate("getComputedStyle(document.querySelector('.ansi-fg-1')).color") == (
        "rgb(255, 107, 107)"  # static/web/ansi.css is on the page
    )
    page.context.close()


def test_the_stream_writer_joins_cut_sequences_rewrites_lines_and_escapes(stage, chromium):
    page = stage.page(chromium)
    page.goto(f"{stage.server}/sandboxes/{stage.sandbox}/")
    html = page.evaluate(
        """() => {
        const pre = document.createElement('pre');
        const writer = SandhubAnsi.writer(pre);
        ['a\\x1b[3', '1mred\\x1b[0m  10%\\r', '\\x1b[2K 100%\\r', '\\ndone \\x1b]0;title\\x07',
         '\\x1b[38;2;0;0;250m<img src=x onerror=alert(1)>'].forEach(c => writer.write(c, 'stdout'));
        writer.write('\\x1b[1moops\\n', 'stderr');
        return pre.innerHTML;
    }"""
    )
    assert html == (
        " 100%\ndone "
        '<span class="ansi-fg-21">&lt;img src=x onerror=alert(1)&gt;</span>'
        '<span class="stderr ansi-bold">oops</span><span class="stderr">\n</span>'
    )
    page.context.close()


# --- 3. an invalid form's errors in view -----------------------------------------------------


@pytest.mark.parametrize("script", [True, False])
def test_an_invalid_create_brings_its_errors_into_view(stage, chromium, script):
    page = stage.page(chromium, viewport={"width": 1280, "height": 500}, java_script_enabled=script)
    page.goto(f"{stage.server}/")
    page.fill("#create-form input[name=cpus]", "999")
    with page.expect_navigation():
        page.click("#create-submit")
    summary = page.locator("#create-errors")
    assert "CPUs" in summary.inner_text() or "cpus" in summary.inner_text().lower()
    page.wait_for_function(f"({IN_VIEW})(document.getElementById('create-errors'))")
    if script:  # the focus moves there too (a screen reader reads the errors)
        page.wait_for_function("document.activeElement.id === 'create-errors'")
    page.context.close()


# --- 6. "Copy link": one button makes the link and copies it --------------------------------


def test_copy_link_makes_the_link_and_copies_it_in_one_click(stage, chromium):
    page = stage.page(chromium)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stage.server)
    page.goto(f"{stage.server}/sandboxes/{stage.sandbox}/")
    row = page.locator("tr.file-row", has_text="a.txt")
    row.locator("button.copy-link").click()
    row.locator(".link-copy-status.link-copied").wait_for()
    assert row.locator(".link-copy-status").inner_text() == "Link copied to the clipboard."
    link = row.locator("input.file-link").input_value()
    assert link.startswith(f"{stage.server}/links/")
    assert page.evaluate("navigator.clipboard.readText()") == link
    assert row.locator("button", has_text="Copy").count() == 1  # no second button to press
    page.context.close()


def test_copy_link_refused_by_the_browser_leaves_the_link_selected(stage, chromium):
    page = stage.page(chromium)
    page.add_init_script(
        "navigator.clipboard.writeText = () => Promise.reject(new Error('not allowed'));"
    )
    page.goto(f"{stage.server}/sandboxes/{stage.sandbox}/")
    row = page.locator("tr.file-row", has_text="a.txt")
    row.locator("button.copy-link").click()
    status = row.locator(".link-copy-status")
    page.wait_for_function("el => el.textContent.includes('by hand')", arg=status.element_handle())
    field = row.locator("input.file-link")
    assert field.evaluate("el => document.activeElement === el")
    selected = field.evaluate("el => [el.selectionStart, el.selectionEnd, el.value.length]")
    assert selected[0] == 0 and selected[1] == selected[2] > 0, selected
    page.context.close()


# --- 4. a preview where nothing listens --------------------------------------------------------


def test_a_preview_where_nothing_listens_gets_a_styled_page(stage, chromium, world):
    off_loop(lambda: services.get_preview_url(world.principal(), stage.sandbox, 8000))
    page = stage.page(chromium)
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Security Policy" in m.text else None)
    response = page.goto(f"{stage.server}/preview/{stage.sandbox}/8000/")
    assert response is not None and response.status == 502
    assert page.inner_text("h1") == "Nothing answers on port 8000"
    assert "python3 -m http.server 8000" in page.inner_text("main")
    # The stylesheet applied (its hash is in the policy), and the policy refused nothing.
    assert page.evaluate("getComputedStyle(document.body).maxWidth") == "672px"
    assert page.evaluate("getComputedStyle(document.querySelector('main')).borderRadius") == "8px"
    assert violations == []
    page.context.close()
