"""The platform's pages under their Content-Security-Policy (platform_site/csp.py) in a real
headless Chromium, against the live server and the real Docker engine: a team owner (and
superuser) signs in and goes through the team pages, the sandbox page, admin and the API docs.
Chromium reports whatever the policy blocks (a `securitypolicyviolation` event, a console
line "Refused to ..."): there must be none, and the interactive parts must still work: the
command runner's live output, htmx swaps, confirm() before a revoke, a button disabled while
its form is sent, a team switch, the load bars' widths, Swagger UI."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from hosts.backends import reset_backends
from hosts.models import Host, Image
from sandboxes import services
from sandboxes.models import CommandExecution, Sandbox
from tenants import apikeys
from tenants.models import AuditLog, Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.web.helpers import off_loop

pytestmark = pytest.mark.docker

PASSWORD = "correct-horse-battery"
COMMAND = "echo first; sleep 1; echo second"
# Reports what the policy blocked, from the page's first script on (a binding the test adds).
REPORTER = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.reportViolation(`${event.violatedDirective} blocked ${event.blockedURI || "inline"}`
    + ` at ${event.sourceFile}:${event.lineNumber}`);
});
"""


def make_world() -> dict[str, Any]:
    reset_backends()
    team = Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=4)
    other = Team.objects.create(slug="beta", name="Team Beta")
    user = get_user_model().objects.create_user(
        "olga", password=PASSWORD, is_staff=True, is_superuser=True
    )
    Membership.objects.create(user=user, team=team, role=Role.OWNER)
    Membership.objects.create(user=user, team=other, role=Role.MEMBER)
    Image.objects.create(name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True)
    Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)
    services.probe_all_hosts(Principal.system())  # load figures for the Hosts page's bars
    principal = Principal(user=user, team=team, channel=Channel.WEB)
    sandbox = services.create_sandbox(principal, name="csp", memory_mb=512)
    services.write_file(principal, sandbox.id, "notes.txt", "hello\n")
    key = apikeys.create_key(user, team, name="to revoke", scopes="read")
    return {"team": team, "principal": principal, "sandbox": sandbox.id, "key": key.key.prefix}


def leftovers(world: dict[str, Any]) -> None:
    for sandbox in Sandbox.objects.filter(team=world["team"]).live():
        services.delete_sandbox(world["principal"], sandbox.public_id)


def admin_pks(sandbox_id: str) -> dict[str, int]:
    return {
        "sandbox": Sandbox.objects.get(public_id=sandbox_id).pk,
        "command": CommandExecution.objects.filter(sandbox__public_id=sandbox_id).latest("pk").pk,
        "audit": AuditLog.objects.latest("pk").pk,
    }


@pytest.fixture
def world(live_db, settings) -> Any:
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    made = off_loop(make_world)
    yield made
    off_loop(leftovers, made)
    reset_backends()


class Watch:
    """What the policy blocked, and the pages' script errors, across the whole context."""

    def __init__(self, context: Any) -> None:
        self.blocked: list[str] = []
        self.errors: list[str] = []
        self.where = "nowhere yet"
        context.expose_binding("reportViolation", lambda source, text: self._blocked(text))
        context.add_init_script(REPORTER)
        context.on("console", self._console)
        context.on("page", lambda page: page.on("pageerror", self._error))

    def _blocked(self, text: str) -> None:
        self.blocked.append(f"{self.where}: {text}")

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text or message.text.startswith("Refused to"):
            self.blocked.append(f"{self.where}: {message.text}")

    def _error(self, error: Any) -> None:
        self.errors.append(f"{self.where}: {error}")

    def visit(self, page: Any, url: str) -> None:
        self.where = url
        response = page.goto(url)
        policy = response.headers.get("content-security-policy", "")
        assert "script-src 'self';" in policy, f"{url} came without the policy: {policy!r}"
        page.wait_for_load_state("networkidle")


class Dialogs:
    """Answers confirm() dialogs as told, and keeps what they asked."""

    def __init__(self, page: Any) -> None:
        self.asked: list[str] = []
        self.answers: list[bool] = []
        page.on("dialog", self._answer)

    def _answer(self, dialog: Any) -> None:
        self.asked.append(dialog.message)
        if self.answers.pop(0) if self.answers else True:
            dialog.accept()
        else:
            dialog.dismiss()


def assert_bars_drawn(page: Any) -> None:
    widths = page.eval_on_selector_all(
        ".bar > span[data-width]", "spans => spans.map(s => [s.dataset.width, s.style.width])"
    )
    assert widths, "no load bars on the page"
    assert all(style == f"{min(100, int(percent))}%" for percent, style in widths), widths


def test_the_pages_work_under_their_content_security_policy(asgi_server, world, chromium):
    server, sandbox_id = asgi_server, world["sandbox"]
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    watch = Watch(context)
    page = context.new_page()
    dialogs = Dialogs(page)

    watch.visit(page, f"{server}/login/")
    page.fill("input[name=username]", "olga")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-submit")
    page.wait_for_url(f"{server}/")
    assert page.locator("tr.sandbox-row", has_text="csp").count() == 1
    assert_bars_drawn(page)  # the quotas

    sandbox_page(page, watch, f"{server}/sandboxes/{sandbox_id}/")
    team_pages(page, watch, dialogs, server, world["key"])
    pks = off_loop(admin_pks, sandbox_id)
    for path in [
        "/admin/",
        "/admin/sandboxes/sandbox/",
        f"/admin/sandboxes/sandbox/{pks['sandbox']}/change/",
        f"/admin/sandboxes/commandexecution/{pks['command']}/change/",
        f"/admin/tenants/auditlog/{pks['audit']}/change/",
    ]:
        watch.visit(page, f"{server}{path}")
        assert "Sandhub administration" in page.inner_text("#site-name")
    api_docs(page, watch, server)
    context.close()

    assert watch.blocked == [], "\n".join(watch.blocked)
    assert watch.errors == [], "\n".join(watch.errors)


def sandbox_page(page: Any, watch: Any, url: str) -> None:
    watch.visit(page, url)
    # htmx took its config from the page (templates/web/base.html): nothing through eval, no
    # <style> of its own.
    config = page.evaluate("[htmx.config.allowEval, htmx.config.includeIndicatorStyles]")
    assert config == [False, False]
    # The runner (static/web/sandbox.js): the first line shows before the command ends.
    page.fill("#run-form textarea[name=command]", COMMAND)
    page.click("#run-submit")
    seen = page.wait_for_function(
        """() => {
            const out = document.querySelector('#run-output').textContent;
            const exit = document.querySelector('#run-exit').textContent.trim();
            return out.includes('first') ? {out, exit} : null;
        }""",
        polling=50,
    ).json_value()
    assert "second" not in seen["out"] and seen["exit"] == "", seen
    expect(page.locator("#run-exit")).to_have_text("0")
    assert page.inner_text("#run-output").split() == ["first", "second"]

    # An htmx swap (hx-post, with the CSRF header htmx takes from hx-headers): a file's link,
    # which selects itself on focus.
    row = page.locator("tr.file-row", has_text="notes.txt")
    row.locator("button.copy-link").click()
    link = row.locator("input.file-link")
    link.focus()
    selected = link.evaluate("el => [el.selectionStart, el.selectionEnd, el.value.length]")
    assert selected[0] == 0 and selected[1] == selected[2] > 0, selected

    # A deploy's button says it is starting, and cannot be pressed again, once its form is
    # sent. A listener on the window (after app.js's on the document) keeps the page here.
    page.evaluate("window.addEventListener('submit', (event) => event.preventDefault())")
    page.fill("#deploy-form textarea[name=deploy-command]", "python3 -m http.server 8000")
    page.fill("#deploy-form input[name=deploy-port]", "8000")
    page.click("#deploy-submit")
    expect(page.locator("#deploy-submit")).to_be_disabled()
    expect(page.locator("#deploy-submit")).to_have_text("Starting…")


def team_pages(page: Any, watch: Any, dialogs: Dialogs, server: str, prefix: str) -> None:
    watch.visit(page, f"{server}/keys/")
    row = page.locator("tr.key-row", has_text=prefix)
    question = f"Revoke key shk_{prefix}? Programs using it stop working at once."
    dialogs.answers = [False, True]
    row.locator("button.revoke-key").click()  # "Cancel": nothing is sent
    assert dialogs.asked == [question]
    assert page.locator(".message").count() == 0
    expect(row.locator(".status")).to_have_text("active")
    row.locator("button.revoke-key").click()
    page.locator(".message", has_text="is revoked").wait_for()
    expect(row.locator(".status")).to_have_text("revoked")
    assert dialogs.asked == [question, question]

    watch.visit(page, f"{server}/hosts/")
    assert_bars_drawn(page)
    for path in ["/team/network/", "/team/", "/team/audit/", "/team/commands/"]:
        watch.visit(page, f"{server}{path}")
    assert "echo first" in page.inner_text("#command-table")

    # The team switch sends its form on change.
    watch.visit(page, f"{server}/")
    page.select_option("#team-switch-select", "beta")
    expect(page.locator("#team-switch-select")).to_have_value("beta")
    assert page.locator("tr.sandbox-row").count() == 0  # team Beta has none


def api_docs(page: Any, watch: Any, server: str) -> None:
    watch.visit(page, f"{server}/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Sandhub API")
    operations = page.locator(".opblock")
    operations.first.wait_for()
    assert operations.count() > 10
    operations.first.locator(".opblock-summary").click()  # opens: Swagger UI's own script
    operations.first.locator(".opblock-body").wait_for()
