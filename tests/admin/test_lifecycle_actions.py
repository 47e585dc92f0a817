"""The sandbox list's Pause / Resume / Stop actions: through the services (on the in-memory
backend), audited on the sandbox's team as the admin, each sandbox's outcome reported."""

from __future__ import annotations

import pytest
from django.test import Client

from sandboxes import services
from sandboxes.models import Sandbox
from tenants.models import AuditLog, Channel
from tests.admin.helpers import action, messages_of

pytestmark = pytest.mark.django_db


def test_pause_stop_and_resume_actions_call_the_services(
    staff_client: Client, superuser, fake_backend, as_alice, team_a
) -> None:
    sandbox_id = services.create_sandbox(as_alice).id
    pk = Sandbox.objects.get(public_id=sandbox_id).pk
    for name, status in (
        ("pause_selected", "paused"),
        ("stop_selected", "stopped"),
        ("resume_selected", "running"),
    ):
        response = action(staff_client, Sandbox, name, [pk])
        assert response.status_code == 302
        assert Sandbox.objects.get(pk=pk).status == status
        assert any(f"{sandbox_id}: {status}" in m for m in messages_of(response)), name
    rows = AuditLog.objects.filter(action__in=["sandbox.pause", "sandbox.stop", "sandbox.resume"])
    assert [(r.action, r.channel, r.actor, r.team) for r in rows.order_by("id")] == [
        ("sandbox.pause", Channel.ADMIN, superuser, team_a),
        ("sandbox.stop", Channel.ADMIN, superuser, team_a),
        ("sandbox.resume", Channel.ADMIN, superuser, team_a),
    ]
    again = action(staff_client, Sandbox, "resume_selected", [pk])
    assert any("running already" in m for m in messages_of(again))
