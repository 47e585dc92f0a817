"""The team pages' accessibility in a real headless Chromium, against the live server: a skip
link is the first Tab stop and moves focus to <main>; every status badge, and the pages' text
on its background, has a WCAG contrast of at least 4.5:1 in the light and the dark scheme
(computed from Chromium's computed styles); the dark scheme is dark; a field's help text is
its accessible description."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from sandboxes.models import CommandStatus, SandboxStatus, SnapshotStatus
from tenants.models import Membership, Role, Team
from tests.web.helpers import off_loop

PASSWORD = "correct-horse-battery"
APP_CSS = Path(settings.BASE_DIR) / "static" / "web" / "app.css"
AA = 4.5

# WCAG 2 contrast of an element's text against the first opaque background behind it.
CONTRAST = """
(el) => {
  const rgb = (text) => text.match(/[\\d.]+/g).map(Number);
  const channel = (c) => {
    c /= 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  };
  const luminance = ([r, g, b]) =>
    0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  let back = el, background = null;
  while (back) {
    const colour = rgb(getComputedStyle(back).backgroundColor);
    if (colour.length < 4 || colour[3] === 1) { background = colour; break; }
    back = back.parentElement;
  }
  if (!background) background = [255, 255, 255];
  const [a, b] = [luminance(rgb(getComputedStyle(el).color)), luminance(background)];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}
"""
# Text the pages show on their backgrounds, beside the badges: one of each kind.
SAMPLES = """
<p id="s-text">text</p><p class="muted" id="s-muted">muted</p><a href="#" id="s-link">link</a>
<div class="card"><p id="s-card">card</p><p class="muted" id="s-card-muted">muted</p>
  <a href="#" id="s-card-link">link</a><small class="error" id="s-card-error">error</small>
  <small class="help" id="s-card-help">help</small>
  <button id="s-button">primary</button>
  <button class="secondary" id="s-secondary">secondary</button>
  <button class="danger" id="s-danger">danger</button></div>
<div class="form-errors"><p id="s-form-error">refused</p></div>
<ul class="messages"><li class="message" id="s-message">info</li>
  <li class="message success" id="s-success">done</li>
  <li class="message error" id="s-error">failed</li></ul>
<p class="warning" id="s-warning">careful</p>
"""


def badge_classes() -> list[str]:
    """Every badge: each status a sandbox, command or snapshot can have, the hosts' states
    and every status class app.css styles, the audit outcomes and a status without a rule."""
    statuses = {*SandboxStatus.values, *CommandStatus.values, *SnapshotStatus.values}
    statuses |= set(re.findall(r"\.status-([a-z_]+)", APP_CSS.read_text()))
    return [f"status status-{s}" for s in sorted(statuses)] + [
        "outcome ok",
        "outcome bad",
        "status",
    ]


def make_world() -> None:
    team = Team.objects.create(slug="alpha", name="Team Alpha")
    user = get_user_model().objects.create_user("olga", password=PASSWORD)
    Membership.objects.create(user=user, team=team, role=Role.OWNER)


@pytest.fixture(scope="module")
def world(live_db) -> None:
    off_loop(make_world)


@pytest.fixture(scope="module")
def signed_in_state(asgi_server, world, chromium) -> Any:
    """The cookies of a signed-in session. Signed in once, before any test: the tests'
    own password hasher (tests/conftest.py) could not check the password set here."""
    context = chromium.new_context()
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{asgi_server}/login/")
    page.fill("input[name=username]", "olga")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{asgi_server}/")
    state = context.storage_state()
    context.close()
    return state


def signed_in(chromium: Any, state: Any, scheme: str = "light") -> Any:
    context = chromium.new_context(
        viewport={"width": 1280, "height": 800}, color_scheme=scheme, storage_state=state
    )
    context.set_default_timeout(30_000)
    return context.new_page()


def test_the_skip_link_is_the_first_tab_stop_and_moves_focus_to_main(
    asgi_server, signed_in_state, chromium
) -> None:
    page = signed_in(chromium, signed_in_state)
    for path in ("/", "/team/", "/keys/"):
        page.goto(f"{asgi_server}{path}")
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "[document.activeElement.className, document.activeElement.textContent,"
            " document.activeElement.getBoundingClientRect().top]"
        )
        assert focused[:2] == ["skip-link", "Skip to main content"], (path, focused)
        assert focused[2] >= 0, f"{path}: the focused skip link is off screen"
        page.keyboard.press("Enter")
        page.wait_for_function("document.activeElement.tagName === 'MAIN'")
        assert page.evaluate("document.activeElement.id") == "main"
    page.context.close()


def contrasts(page: Any) -> dict[str, float]:
    """Each badge's and each sample text's contrast, put in <main> of the page shown."""
    badges = "".join(f'<span class="{c}">{c}</span> ' for c in badge_classes())
    page.eval_on_selector(
        "main",
        "(main, html) => { const box = document.createElement('div'); box.id = 'samples';"
        " box.innerHTML = html; main.prepend(box); }",
        f"<p id='badges'>{badges}</p>{SAMPLES}",
    )
    found = {}
    for element in page.query_selector_all("#badges span, #samples [id^=s-]"):
        label = element.get_attribute("id") or element.get_attribute("class") or ""
        found[label] = element.evaluate(CONTRAST)
    return found


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_badges_and_text_are_at_least_4_5_to_1(
    asgi_server, signed_in_state, chromium, scheme
) -> None:
    page = signed_in(chromium, signed_in_state, scheme)
    page.goto(f"{asgi_server}/")
    found = contrasts(page)
    page.context.close()
    assert "status status-running" in found and "s-danger" in found, found
    low = {label: round(ratio, 2) for label, ratio in found.items() if ratio < AA}
    assert low == {}, f"{scheme}: below {AA}:1: {low}"


def test_the_dark_scheme_is_dark(asgi_server, signed_in_state, chromium) -> None:
    page = signed_in(chromium, signed_in_state, "dark")
    page.goto(f"{asgi_server}/team/")
    body, card = page.evaluate(
        "[getComputedStyle(document.body).backgroundColor,"
        " getComputedStyle(document.querySelector('.card') || document.body).backgroundColor]"
    )
    page.context.close()
    for colour in (body, card):
        red, green, blue = (int(c) for c in re.findall(r"\d+", colour)[:3])
        assert max(red, green, blue) < 64, f"not dark: {colour}"


def test_a_fields_help_text_is_its_accessible_description(
    asgi_server, signed_in_state, chromium
) -> None:
    page = signed_in(chromium, signed_in_state)
    page.goto(f"{asgi_server}/team/")
    field = page.locator("#id_username")
    help_text = page.inner_text("#id_username_helptext").strip()
    assert help_text
    session = page.context.new_cdp_session(page)
    session.send("Accessibility.enable")
    node = session.send(
        "Accessibility.getPartialAXTree",
        {"backendNodeId": backend_node_id(session, field), "fetchRelatives": False},
    )["nodes"][0]
    page.context.close()
    assert node.get("description", {}).get("value") == help_text


def backend_node_id(session: Any, locator: Any) -> int:
    document = session.send("DOM.getDocument", {"depth": 0})
    found = session.send(
        "DOM.querySelector", {"nodeId": document["root"]["nodeId"], "selector": "#id_username"}
    )
    return session.send("DOM.describeNode", {"nodeId": found["nodeId"]})["node"]["backendNodeId"]
