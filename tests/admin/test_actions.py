"""Django admin's actions on sandboxes, hosts and background commands: each goes through the
services (confirmed first, audited, rows kept), forms change only what they may, and probes
store their figures. Fixtures: tests/admin/conftest.py."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory, override_settings

from hosts.backends import reset_backends
from hosts.backends.base import ProbeResult
from hosts.models import Host
from sandboxes.models import CommandExecution, Sandbox, SandboxStatus
from tenants.models import AuditLog, Channel
from tests.admin.helpers import World, action, messages_of, url

pytestmark = pytest.mark.django_db


# --- sandboxes -------------------------------------------------------------------------------


def test_sandbox_delete_action_confirms_first(staff_client: Client, world: World) -> None:
    response = action(staff_client, Sandbox, "delete_selected", [world.sandbox.pk])
    assert response.status_code == 200
    assert world.sandbox.public_id in response.content.decode()
    world.sandbox.refresh_from_db()
    assert world.sandbox.status == SandboxStatus.PENDING
    assert not AuditLog.objects.filter(action="sandbox.delete").exists()


def test_sandbox_delete_action_calls_the_service(
    staff_client: Client, superuser, world: World
) -> None:
    response = action(staff_client, Sandbox, "delete_selected", [world.sandbox.pk], post="yes")
    assert response.status_code == 302
    world.sandbox.refresh_from_db()
    assert world.sandbox.status == SandboxStatus.DELETED
    assert world.sandbox.deleted_at is not None
    assert Sandbox.objects.filter(pk=world.sandbox.pk).exists()  # the row stays as history

    rows = AuditLog.objects.filter(action="sandbox.delete")
    assert rows.count() == 1
    row = rows.get()
    assert row.channel == Channel.ADMIN
    assert row.actor == superuser
    assert row.team == world.team
    assert row.target_id == world.sandbox.public_id
    assert row.outcome == "ok"
    assert row.source_address == "127.0.0.1"


def test_deleting_a_deleted_sandbox_calls_nothing(staff_client: Client, world: World) -> None:
    action(staff_client, Sandbox, "delete_selected", [world.sandbox.pk], post="yes")
    response = action(staff_client, Sandbox, "delete_selected", [world.sandbox.pk], post="yes")
    assert any("already deleted" in m for m in messages_of(response))
    assert AuditLog.objects.filter(action="sandbox.delete").count() == 1


def test_sandbox_rows_cannot_be_deleted(staff_client: Client, world: World) -> None:
    delete = url(Sandbox, "delete", world.sandbox.pk)
    assert staff_client.post(delete, {"post": "yes"}).status_code == 403
    assert Sandbox.objects.filter(pk=world.sandbox.pk).exists()


def test_sandbox_form_changes_only_the_name(staff_client: Client, world: World) -> None:
    response = staff_client.post(
        url(Sandbox, "change", world.sandbox.pk),
        {"name": "renamed", "status": SandboxStatus.RUNNING, "memory_mb": "99999"},
    )
    assert response.status_code == 302, response.content
    world.sandbox.refresh_from_db()
    assert world.sandbox.name == "renamed"
    assert world.sandbox.status == SandboxStatus.PENDING
    assert world.sandbox.memory_mb == 256
    rename = AuditLog.objects.get(action="sandbox.rename")
    assert (rename.channel, rename.details["to"]) == ("admin", "renamed")


# --- hosts -----------------------------------------------------------------------------------


def test_drain_and_undrain_actions_are_audited(
    staff_client: Client, superuser, world: World
) -> None:
    host = world.host
    action(staff_client, Host, "drain_hosts", [host.pk])
    host.refresh_from_db()
    assert host.draining is True
    row = AuditLog.objects.get(action="host.drain")
    assert (row.channel, row.actor, row.target_id) == (Channel.ADMIN, superuser, str(host.pk))
    assert row.details["draining"] is True

    action(staff_client, Host, "undrain_hosts", [host.pk])
    host.refresh_from_db()
    assert host.draining is False
    assert AuditLog.objects.filter(action="host.drain").count() == 2


def test_host_form_cannot_change_draining(staff_client: Client, world: World) -> None:
    host = world.host
    form = {
        "name": host.name,
        "kind": host.kind,
        "endpoint": host.endpoint,
        "enabled": "on",
        "draining": "on",
        "max_sandboxes": "7",
        "labels": "{}",
        "options": "{}",
    }
    response = staff_client.post(url(Host, "change", host.pk), form)
    assert response.status_code == 302, response.content
    host.refresh_from_db()
    assert host.max_sandboxes == 7
    assert host.draining is False


class FakeProbeBackend:
    """Stands in for a real engine: a probe that always answers the same."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def probe(self) -> ProbeResult:
        return ProbeResult(healthy=True, cpu_percent=25.0, memory_percent=10.0)

    def close(self) -> None:
        pass


@pytest.fixture
def fake_backends():
    reset_backends()
    with override_settings(SANDHUB_BACKENDS={"docker": f"{__name__}.FakeProbeBackend"}):
        yield
    reset_backends()


def test_probe_action_stores_the_figures(staff_client: Client, world: World, fake_backends) -> None:
    response = action(staff_client, Host, "probe_hosts", [world.host.pk])
    world.host.refresh_from_db()
    assert world.host.last_probe_at is not None
    assert world.host.cpu_percent == 25.0
    assert world.host.idle_score == pytest.approx(0.75)
    assert any("engine-1: healthy" in m for m in messages_of(response))
    assert AuditLog.objects.get(action="host.probe").channel == Channel.ADMIN


@override_settings(SANDHUB_BACKENDS={})
def test_probe_action_reports_errors(staff_client: Client, world: World) -> None:
    reset_backends()
    response = action(staff_client, Host, "probe_hosts", [world.host.pk])
    assert response.status_code == 302
    assert any(m.startswith("Failed: engine-1") for m in messages_of(response))
    row = AuditLog.objects.get(action="host.probe")
    assert row.outcome == "error"
    assert row.channel == Channel.ADMIN


# --- background commands ---------------------------------------------------------------------


def test_cancel_background_action_cancels_through_the_service(
    staff_client: Client, superuser, fake_backend, as_alice
) -> None:
    from sandboxes import services

    sandbox_id = services.create_sandbox(as_alice).id
    running = services.start_background(as_alice, sandbox_id, "echo hi; sleep 60")
    unseen = services.start_background(as_alice, sandbox_id, "echo quick")  # ended, not looked at
    recorded = services.start_background(as_alice, sandbox_id, "echo done")
    services.check_background(as_alice, sandbox_id, recorded.id)  # records its end
    foreground = services.run_command(as_alice, sandbox_id, "echo hi")
    start = AuditLog.objects.order_by("-id").values_list("id", flat=True).first()

    chosen = [running.id, unseen.id, recorded.id, foreground.id]
    response = action(staff_client, CommandExecution, "cancel_background", chosen)
    assert response.status_code == 302

    statuses = dict(CommandExecution.objects.filter(pk__in=chosen).values_list("pk", "status"))
    assert statuses == {
        running.id: "cancelled",
        unseen.id: "succeeded",
        recorded.id: "succeeded",
        foreground.id: "succeeded",
    }
    [done, failed] = messages_of(response)
    assert f"command {running.id} in {sandbox_id}: cancelled" in done
    assert f"command {unseen.id} in {sandbox_id}: had already ended (succeeded)" in done
    assert f"command {recorded.id} in {sandbox_id}: already succeeded" in done
    assert failed.startswith("Failed: ") and "not a background command" in failed
    # Only the two that were still running went to the service; each left an admin row.
    rows = list(AuditLog.objects.filter(id__gt=start).order_by("id"))
    assert [(r.action, r.outcome) for r in rows] == [("command.background.cancel", "ok")] * 2
    assert {(r.channel, r.actor_id, r.team.slug, r.target_id) for r in rows} == {
        (Channel.ADMIN, superuser.pk, "alpha", sandbox_id)
    }
    assert sorted(r.details["command_id"] for r in rows) == [running.id, unseen.id]


def test_background_commands_are_filtered_and_show_their_state(
    staff_client: Client, fake_backend, as_alice
) -> None:
    from sandboxes import services

    sandbox_id = services.create_sandbox(as_alice).id
    background = services.start_background(as_alice, sandbox_id, "sleep 60")
    foreground = services.run_command(as_alice, sandbox_id, "echo hi")

    listed = staff_client.get(url(CommandExecution, "changelist"), {"background__exact": "1"})
    assert [c.pk for c in listed.context["cl"].result_list] == [background.id]
    assert "Cancel selected background commands" in listed.content.decode()

    page = staff_client.get(url(CommandExecution, "change", background.id)).content.decode()
    assert "Background state" in page and "/run/sandhub/jobs/" in page
    page = staff_client.get(url(CommandExecution, "change", foreground.id)).content.decode()
    assert "Background state" not in page


def test_cancel_action_needs_the_change_permission(django_user_model) -> None:
    from django.contrib.auth.models import Permission

    staff = django_user_model.objects.create_user("ops", password="pw-unused-3", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_commandexecution"))
    request = RequestFactory().get("/")
    request.user = staff
    model_admin = admin.site._registry[CommandExecution]
    assert "cancel_background" not in model_admin.get_actions(request)

    staff.user_permissions.add(Permission.objects.get(codename="change_commandexecution"))
    request.user = django_user_model.objects.get(pk=staff.pk)  # permissions are cached
    assert "cancel_background" in model_admin.get_actions(request)
    assert not model_admin.has_change_permission(request)  # the rows stay read-only
