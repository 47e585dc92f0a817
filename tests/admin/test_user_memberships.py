"""A user's team memberships are edited inline on Django's user add and change pages: one save
creates the user and his memberships, each through tenants.services (an audit row each).
Fixtures: tests/admin/conftest.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tenants import services
from tenants.models import AuditLog, Membership, Role, Team
from tests.admin.helpers import World, messages_of

pytestmark = pytest.mark.django_db

ADD = "/admin/auth/user/add/"
PASSWORD = "a-long-enough-password-42"


def inline(rows: list[dict[str, Any]], initial: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = {
        "memberships-TOTAL_FORMS": str(len(rows)),
        "memberships-INITIAL_FORMS": str(initial),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    for n, row in enumerate(rows):
        data.update({f"memberships-{n}-{name}": value for name, value in row.items()})
    return data


def audit_actions(username: str) -> list[str]:
    rows = AuditLog.objects.filter(target_type="membership", target_id=username, outcome="ok")
    return list(rows.order_by("pk").values_list("action", flat=True))


def test_the_user_pages_show_memberships_inline(staff_client: Client, world: World) -> None:
    assert "memberships-0-team" in staff_client.get(ADD).content.decode()
    page = staff_client.get(f"/admin/auth/user/{world.member.pk}/change/").content.decode()
    assert "memberships-TOTAL_FORMS" in page and "acme" in page


def test_one_save_creates_a_user_with_his_team_and_role(staff_client: Client, world: World) -> None:
    other = Team.objects.create(slug="other", name="Other")
    data = {
        "username": "newcomer",
        "usable_password": "true",
        "password1": PASSWORD,
        "password2": PASSWORD,
        **inline(
            [{"team": world.team.pk, "role": Role.ADMIN}, {"team": other.pk, "role": "viewer"}]
        ),
    }
    response = staff_client.post(ADD, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    user = get_user_model().objects.get(username="newcomer")
    roles = dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))
    assert roles == {"acme": Role.ADMIN, "other": "viewer"}
    assert audit_actions("newcomer") == ["membership.add", "membership.add"]


def test_role_changes_and_removals_go_through_the_services(
    staff_client: Client, world: World
) -> None:
    membership = Membership.objects.get(user=world.member)
    data = {
        "username": world.member.username,
        "date_joined_0": "2026-01-01",
        "date_joined_1": "10:00:00",
        "is_active": "on",
        **inline([{"id": membership.pk, "team": world.team.pk, "role": Role.OWNER}], initial=1),
    }
    change = f"/admin/auth/user/{world.member.pk}/change/"
    assert staff_client.post(change, data).status_code == 302
    assert Membership.objects.get(pk=membership.pk).role == Role.OWNER
    data["memberships-0-DELETE"] = "on"
    assert staff_client.post(change, data).status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert audit_actions("alice") == ["membership.change_role", "membership.remove"]


def test_moving_a_membership_to_another_team_is_refused_on_the_form(
    staff_client: Client, world: World
) -> None:
    other = Team.objects.create(slug="other", name="Other")
    membership = Membership.objects.get(user=world.member)
    data = {
        "username": world.member.username,
        "date_joined_0": "2026-01-01",
        "date_joined_1": "10:00:00",
        **inline([{"id": membership.pk, "team": other.pk, "role": Role.MEMBER}], initial=1),
    }
    response = staff_client.post(f"/admin/auth/user/{world.member.pk}/change/", data)
    assert response.status_code == 200
    assert "cannot be moved to another team" in response.content.decode()
    assert Membership.objects.get(pk=membership.pk).team == world.team


def test_a_refusal_of_the_service_is_shown(staff_client: Client, world: World, monkeypatch) -> None:
    from tenants.errors import Conflict

    def refuse(*args: Any) -> None:
        raise Conflict("refused for the test")

    # Refusals an admin can meet (someone else added him meanwhile) are races: forced here.
    monkeypatch.setattr(services, "add_member", refuse)
    data = {
        "username": "newcomer",
        "usable_password": "true",
        "password1": PASSWORD,
        "password2": PASSWORD,
        **inline([{"team": world.team.pk, "role": Role.MEMBER}]),
    }
    response = staff_client.post(ADD, data, follow=True)
    assert any("refused for the test" in m for m in messages_of(response))
    assert not Membership.objects.filter(user__username="newcomer").exists()


def test_the_same_team_twice_is_refused_on_the_form(staff_client: Client, world: World) -> None:
    data = {
        "username": "newcomer",
        "usable_password": "true",
        "password1": PASSWORD,
        "password2": PASSWORD,
        **inline([{"team": world.team.pk, "role": Role.MEMBER}] * 2),
    }
    response = staff_client.post(ADD, data)
    assert response.status_code == 200
    assert "Please correct the duplicate data" in response.content.decode()
    assert not get_user_model().objects.filter(username="newcomer").exists()
    assert audit_actions("newcomer") == []
