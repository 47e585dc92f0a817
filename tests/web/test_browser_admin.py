"""Admin in a real headless Chromium at 1280x800, against the live server: the command
executions', hosts' and teams' lists (and the sandboxes' and audit log's) fit their
container (no horizontal scroll) with their important columns in view, and a new user is
made a member of a team with a role in the same form that creates him (the membership added
through tenants.services, audited)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from hosts.models import Host, Image
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from tenants import audit
from tenants.models import AuditLog, Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.web.helpers import off_loop

PASSWORD = "correct-horse-battery"
LONG_COMMAND = "python -m pytest tests/ -x -q --maxfail=1 " + "--deselect tests/some_module.py " * 8
LISTS = {
    "/admin/sandboxes/commandexecution/": ["command", "status", "exit code", "duration"],
    "/admin/hosts/host/": ["name", "state", "sandboxes", "host key"],
    "/admin/tenants/team/": ["slug", "name", "members", "per sandbox"],
    "/admin/sandboxes/sandbox/": ["public id", "name", "status"],
    "/admin/tenants/auditlog/": ["created at", "action", "outcome"],
}


def make_world() -> dict[str, Any]:
    users = get_user_model().objects
    users.create_superuser("root", "root@example.com", PASSWORD)
    team = Team.objects.create(slug="research-and-development", name="Research and Development")
    owner = users.create_user("alice", password=PASSWORD)
    Membership.objects.create(user=owner, team=team, role=Role.OWNER)
    host = Host.objects.create(
        name="engine-with-a-long-name-1",
        kind=Host.Kind.SSH,
        endpoint="ssh://sandbox-host-number-one.internal.example.com:2222",
        healthy=True,
    )
    image = Image.objects.create(name="python", reference="sandhub/sandbox:latest")
    sandbox = Sandbox.objects.create(
        team=team,
        owner=owner,
        host=host,
        image=image,
        name="scratch",
        cpus=1.0,
        memory_mb=256,
        pids_limit=64,
    )
    for n in range(3):
        CommandExecution.objects.create(
            sandbox=sandbox,
            actor=owner,
            channel=Channel.MCP,
            command=LONG_COMMAND,
            status=CommandStatus.SUCCEEDED,
            exit_code=n,
            duration_seconds=184.2 + n,
        )
    principal = Principal(user=owner, team=team, channel=Channel.WEB, source_address="10.0.0.7")
    audit.record(principal, "sandbox.create", target_type="sandbox", target_id=sandbox.public_id)
    return {"team": team}


@pytest.fixture(scope="module")
def world(live_db) -> dict[str, Any]:
    return off_loop(make_world)


@pytest.fixture(scope="module")
def admin_page(asgi_server, world, chromium) -> Any:
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{asgi_server}/admin/login/")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{asgi_server}/admin/")
    yield page
    context.close()


@pytest.mark.parametrize("path", list(LISTS))
def test_admin_lists_fit_at_1280(asgi_server, admin_page, path) -> None:
    admin_page.goto(f"{asgi_server}{path}")
    widths = admin_page.eval_on_selector(
        "#result_list", "t => [t.scrollWidth, t.parentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], f"{path}: the table is {widths[0]} px in {widths[1]} px"
    box = admin_page.eval_on_selector(".results", "el => el.getBoundingClientRect().right")
    for heading in LISTS[path]:
        column = admin_page.locator("#result_list thead th", has_text=heading).first
        assert column.is_visible(), f"{path}: no column {heading!r}"
        right = column.evaluate("th => th.getBoundingClientRect().right")
        assert right <= min(box, 1280), f"{path}: {heading!r} ends at {right} px, off screen"


def test_a_long_command_is_cut_with_its_whole_text_in_the_title(asgi_server, admin_page) -> None:
    admin_page.goto(f"{asgi_server}/admin/sandboxes/commandexecution/")
    cell = admin_page.locator("#result_list td.field-short_command span").first
    assert cell.get_attribute("title") == LONG_COMMAND
    assert cell.inner_text().endswith("…")
    assert "3 min 4 s" in admin_page.inner_text("#result_list")


def test_a_new_user_joins_a_team_in_the_same_form(asgi_server, admin_page, world) -> None:
    page = admin_page
    page.goto(f"{asgi_server}/admin/auth/user/add/")
    page.fill("input[name=username]", "newcomer")
    page.fill("input[name=password1]", "a-long-enough-password-42")
    page.fill("input[name=password2]", "a-long-enough-password-42")
    page.select_option("select[name=memberships-0-team]", label=str(world["team"]))
    page.select_option("select[name=memberships-0-role]", Role.ADMIN)
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")

    def saved() -> tuple[str, list[str]]:
        membership = Membership.objects.get(user__username="newcomer")
        actions = list(
            AuditLog.objects.filter(
                target_type="membership", target_id="newcomer", outcome="ok"
            ).values_list("action", flat=True)
        )
        return membership.role, actions

    role, actions = off_loop(saved)
    assert role == Role.ADMIN
    assert actions == ["membership.add"]
