"""Admin of the egress policy (sandboxes/admin/egress.py, tenants/admin/team_egress.py): the
team's egress fields (changed through the services, audited; the ranges' help says what
allowing one means), secrets (the value write-only, encrypted by the service, shown nowhere),
refused connections read-only and inline on the sandbox's page."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from sandboxes import services
from sandboxes.models import EgressRefusal, EgressSecret, Sandbox
from tenants.models import AuditLog, Channel, Team
from tenants.principal import Principal
from tests.admin.helpers import World, messages_of, url

pytestmark = pytest.mark.django_db

VALUE = "sk-admin-typed-0123456789"


def _value(bound: Any) -> Any:
    value = bound.value()  # prepared for its widget already (JSON as text)
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return "" if value is None else value


def form_data(client: Client, change_url: str) -> dict[str, Any]:
    """The change page's form as a browser would post it unchanged (inlines included)."""
    context = client.get(change_url).context
    forms = [context["adminform"].form]
    data: dict[str, Any] = {}
    for inline in context["inline_admin_formsets"]:
        forms += [inline.formset.management_form, *inline.formset.forms]
    for form in forms:
        for name in form.fields:
            bound = form[name]
            if bound.field.disabled:
                continue
            value = bound.value()
            if isinstance(value, bool):
                if value:
                    data[bound.html_name] = "on"
                continue
            data[bound.html_name] = _value(bound)
    return data


def test_the_team_page_has_the_egress_fields_and_says_what_a_range_allows(
    staff_client: Client, world: World
) -> None:
    page = staff_client.get(url(world.team, "change", world.team.pk)).content.decode()
    for field in ("egress_max_mode", "egress_allowlist", "egress_allowed_ranges"):
        assert f'name="{field}"' in page
    assert "Allowing a range lets every sandbox of this team" in page


def test_egress_changes_go_through_the_services(staff_client: Client, world: World) -> None:
    change = url(world.team, "change", world.team.pk)
    data = form_data(staff_client, change)
    data.update(
        egress_allowlist='["pypi.org", "*.pythonhosted.org:443"]',
        egress_allowed_ranges='["10.20.0.0/16"]',
        egress_max_mode="allowlist",
    )
    response = staff_client.post(change, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    team = Team.objects.get(pk=world.team.pk)
    assert team.egress_allowlist == ["pypi.org", "*.pythonhosted.org:443"]
    assert team.egress_allowed_ranges == ["10.20.0.0/16"] and team.egress_max_mode == "allowlist"
    row = AuditLog.objects.get(action="egress.team.set", channel="admin", outcome="ok")
    assert row.details["allowlist"]["to"] == ["pypi.org", "*.pythonhosted.org:443"]
    # The ranges are policy too: on record with the rest (they were saved with the row alone).
    assert row.details["allowed_ranges"] == {"from": [], "to": ["10.20.0.0/16"]}


def test_a_bad_rule_is_refused_by_the_service(staff_client: Client, world: World) -> None:
    change = url(world.team, "change", world.team.pk)
    data = {**form_data(staff_client, change), "egress_allowlist": '["bad name here"]'}
    response = staff_client.post(change, data, follow=True)
    assert any("bad name here" in m for m in messages_of(response))
    assert Team.objects.get(pk=world.team.pk).egress_allowlist == []
    assert AuditLog.objects.filter(action="egress.team.set", outcome="invalid").exists()


def test_a_bad_range_is_refused_beside_its_field(staff_client: Client, world: World) -> None:
    change = url(world.team, "change", world.team.pk)
    data = {**form_data(staff_client, change), "egress_allowed_ranges": '["10.0.0.1/8"]'}
    response = staff_client.post(change, data)
    assert response.status_code == 200 and "is not a CIDR range" in response.content.decode()
    assert Team.objects.get(pk=world.team.pk).egress_allowed_ranges == []


def test_a_secret_added_in_admin_is_encrypted_and_never_shown(
    staff_client: Client, world: World
) -> None:
    data = {
        "team": world.team.pk,
        "user": "",
        "name": "ADMIN_TOKEN",
        "hosts": '["api.example.com"]',
        "header": "x-api-key",
        "template": "{value}",
        "value": VALUE,
    }
    response = staff_client.post(url(EgressSecret, "add"), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    secret = EgressSecret.objects.get(name="ADMIN_TOKEN")
    assert secret.team == world.team and secret.user is None
    assert VALUE not in secret.value_encrypted and secret.value_encrypted
    for page in (url(EgressSecret, "changelist"), url(EgressSecret, "change", secret.pk)):
        text = staff_client.get(page).content.decode()
        assert "ADMIN_TOKEN" in text and VALUE not in text
        assert secret.value_encrypted not in text
    assert AuditLog.objects.filter(channel="admin", target_id=str(secret.pk)).exists()


def test_a_new_secret_needs_its_value(staff_client: Client, world: World) -> None:
    data = {"team": world.team.pk, "name": "EMPTY", "hosts": '["a.example"]',
            "header": "Authorization", "template": "Bearer {value}", "value": ""}  # fmt: skip
    response = staff_client.post(url(EgressSecret, "add"), data)
    assert response.status_code == 200 and "needs its value" in response.content.decode()
    assert not EgressSecret.objects.exists()


def test_refusals_are_read_only_and_inline_on_the_sandbox(
    staff_client: Client, world: World
) -> None:
    now = timezone.now()
    row = EgressRefusal.objects.create(
        sandbox=world.sandbox,
        destination="evil.example:443",
        reason="not in the allow-list",
        count=9,
        first_at=now - timedelta(minutes=1),
        last_at=now,
    )
    assert staff_client.get(url(EgressRefusal, "changelist")).status_code == 200
    assert staff_client.get(url(EgressRefusal, "add")).status_code == 403
    change = url(EgressRefusal, "change", row.pk)
    assert staff_client.post(change, {"count": "0"}).status_code == 403
    page = staff_client.get(url(world.sandbox, "change", world.sandbox.pk)).content.decode()
    assert "evil.example:443" in page and "refused connections" in page.lower()


def test_a_secret_value_given_as_a_variable_is_masked_on_the_sandbox_page(
    staff_client: Client, world: World
) -> None:
    # The member created the sandbox with the value itself in env (not its placeholder).
    services.add_secret(
        Principal(user=world.member, team=world.team, channel=Channel.WEB),
        name="TEAM_KEY",
        hosts=["api.example.com"],
        value=VALUE,
    )
    Sandbox.objects.filter(pk=world.sandbox.pk).update(env={"KEY": VALUE, "MODE": "fast"})
    page = staff_client.get(url(world.sandbox, "change", world.sandbox.pk)).content.decode()
    assert "[secret TEAM_KEY]" in page and "fast" in page
    assert VALUE not in page
