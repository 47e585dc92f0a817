"""Django admin's history stays read-only: audit rows and command records have no add,
change or delete, in permissions and in what a forged request gets. Fixtures:
tests/admin/conftest.py."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory

from sandboxes.models import CommandExecution
from tenants.models import AuditLog, Channel
from tests.admin.helpers import World, url

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", [AuditLog, CommandExecution])
def test_history_admin_has_no_write_permissions(superuser, model) -> None:
    request = RequestFactory().get("/")
    request.user = superuser
    model_admin = admin.site._registry[model]
    assert model_admin.has_view_permission(request)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert "delete_selected" not in model_admin.get_actions(request)


def test_audit_log_edits_and_deletes_are_refused(staff_client: Client, world: World) -> None:
    row = world.audit_row
    response = staff_client.post(
        url(AuditLog, "change", row.pk), {"action": "forged", "channel": Channel.SYSTEM}
    )
    assert response.status_code == 403
    assert staff_client.post(url(AuditLog, "delete", row.pk), {"post": "yes"}).status_code == 403
    row.refresh_from_db()
    assert row.action == "sandbox.create"


def test_command_edits_and_deletes_are_refused(staff_client: Client, world: World) -> None:
    command = world.command
    response = staff_client.post(url(CommandExecution, "change", command.pk), {"exit_code": "9"})
    assert response.status_code == 403
    delete = url(CommandExecution, "delete", command.pk)
    assert staff_client.post(delete, {"post": "yes"}).status_code == 403
    command.refresh_from_db()
    assert command.exit_code == 0
