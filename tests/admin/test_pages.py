"""Django admin: every project model is registered and renders (change lists, searches,
change and add forms), output escaped, members inline. Fixtures: tests/admin/conftest.py."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.core import checks
from django.test import Client

from hosts.models import Credential, Host, Image
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog, Membership, Team
from tests.admin.helpers import World, url

pytestmark = pytest.mark.django_db

PROJECT_APPS = ("tenants", "hosts", "sandboxes")


def test_every_project_model_is_registered() -> None:
    for app_label in PROJECT_APPS:
        for model in apps.get_app_config(app_label).get_models():
            assert admin.site.is_registered(model), f"{model.__name__} has no admin"


def test_admin_system_checks_pass() -> None:
    errors = [e for e in checks.run_checks(tags=[checks.Tags.admin]) if e.is_serious()]
    assert errors == []


def test_changelists_and_change_forms_render(staff_client: Client, world: World) -> None:
    for obj in world.objects():
        changelist = url(obj, "changelist")
        assert staff_client.get(changelist).status_code == 200, changelist
        # A search exercises search_fields, which Django only checks when used.
        assert staff_client.get(changelist, {"q": "acme"}).status_code == 200, changelist
        change = url(obj, "change", obj.pk)
        assert staff_client.get(change).status_code == 200, change


def test_add_forms_render_where_adding_is_allowed(staff_client: Client, world: World) -> None:
    for model in (Team, Membership, Credential, Host, Image):
        assert staff_client.get(url(model, "add")).status_code == 200, model
    # History, and sandboxes (created by the services only), have no add form.
    for model in (AuditLog, CommandExecution, Sandbox):
        assert staff_client.get(url(model, "add")).status_code == 403, model


def test_command_output_is_escaped(staff_client: Client, world: World) -> None:
    page = staff_client.get(url(world.command, "change", world.command.pk)).content.decode()
    assert "&lt;hello&gt;" in page
    assert "<hello>" not in page


def test_team_page_lists_members_inline(staff_client: Client, world: World) -> None:
    page = staff_client.get(url(world.team, "change", world.team.pk)).content.decode()
    assert "memberships-TOTAL_FORMS" in page
    assert "alice" in page
