"""Django admin: every model renders, secrets stay write-only, history stays read-only, and
the host and sandbox actions go through the services (audited, rows kept)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.messages import get_messages
from django.core import checks
from django.db import models
from django.test import Client, RequestFactory, override_settings
from django.urls import reverse

from hosts.backends import reset_backends
from hosts.backends.base import ProbeResult
from hosts.models import Credential, Host, Image
from sandboxes.models import CommandExecution, CommandStatus, Sandbox, SandboxStatus
from tenants import audit
from tenants.models import AuditLog, Channel, Membership, Role, Team
from tenants.principal import Principal

pytestmark = pytest.mark.django_db

SECRET = "correct-horse-battery-staple-4711"
PROJECT_APPS = ("tenants", "hosts", "sandboxes")


@dataclass
class World:
    team: Team
    member: Any
    credential: Credential
    host: Host
    image: Image
    sandbox: Sandbox
    command: CommandExecution
    audit_row: AuditLog

    def objects(self) -> list[models.Model]:
        membership = Membership.objects.get(user=self.member, team=self.team)
        return [
            self.team,
            membership,
            self.audit_row,
            self.credential,
            self.host,
            self.image,
            self.sandbox,
            self.command,
        ]


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw-unused-1")


@pytest.fixture
def staff_client(superuser) -> Client:
    client = Client()
    client.force_login(superuser)
    return client


@pytest.fixture
def world(django_user_model) -> World:
    team = Team.objects.create(slug="acme", name="Acme")
    member = django_user_model.objects.create_user("alice", password="pw-unused-2")
    Membership.objects.create(user=member, team=team, role=Role.MEMBER)
    credential = Credential(name="tls", kind=Credential.Kind.PASSWORD, username="ops")
    credential.set_secret(SECRET)
    credential.save()
    host = Host.objects.create(
        name="engine-1", kind=Host.Kind.DOCKER, endpoint="unix:///nowhere.sock"
    )
    image = Image.objects.create(name="python", reference="sandhub/sandbox:latest")
    image.teams.add(team)
    # Pending: deleting it needs no backend, the service only marks it deleted.
    sandbox = Sandbox.objects.create(
        team=team,
        owner=member,
        host=host,
        image=image,
        name="scratch",
        cpus=1.0,
        memory_mb=256,
        pids_limit=64,
        env={"GREETING": "hi"},
    )
    command = CommandExecution.objects.create(
        sandbox=sandbox,
        actor=member,
        channel=Channel.WEB,
        command="echo <hello>",
        status=CommandStatus.SUCCEEDED,
        exit_code=0,
        stdout="<hello>\n",
    )
    audit_row = audit.record(
        Principal(user=member, team=team, channel=Channel.WEB, source_address="10.0.0.7"),
        "sandbox.create",
        target_type="sandbox",
        target_id=sandbox.public_id,
        details={"image": "python"},
    )
    return World(team, member, credential, host, image, sandbox, command, audit_row)


def url(model: type[models.Model] | models.Model, view: str, *args: Any) -> str:
    meta = model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=args)


def action(client: Client, model: type[models.Model], name: str, pks: list[int], **extra):
    data = {"action": name, ACTION_CHECKBOX_NAME: [str(pk) for pk in pks], **extra}
    return client.post(url(model, "changelist"), data)


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


# --- every model renders ---------------------------------------------------------------------


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


# --- credentials -----------------------------------------------------------------------------


def test_credential_add_stores_secret_encrypted(staff_client: Client) -> None:
    response = staff_client.post(
        url(Credential, "add"),
        {"name": "box", "kind": Credential.Kind.PASSWORD, "username": "root", "secret": SECRET},
    )
    assert response.status_code == 302, response.content
    credential = Credential.objects.get(name="box")
    column = Credential.objects.filter(pk=credential.pk).values_list("secret_encrypted", flat=True)[
        0
    ]
    assert SECRET not in column
    assert credential.get_secret() == SECRET


def test_credential_change_page_shows_neither_secret_nor_ciphertext(
    staff_client: Client, world: World
) -> None:
    page = staff_client.get(url(Credential, "change", world.credential.pk)).content.decode()
    assert SECRET not in page
    assert world.credential.secret_encrypted not in page
    assert 'name="secret"' in page


def test_credential_secret_required_on_add(staff_client: Client) -> None:
    response = staff_client.post(
        url(Credential, "add"), {"name": "box", "kind": Credential.Kind.PASSWORD}
    )
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert not Credential.objects.filter(name="box").exists()


def test_rejected_form_does_not_echo_the_secret(staff_client: Client) -> None:
    # The name is missing, so the form comes back with errors: the secret must not be in it.
    response = staff_client.post(
        url(Credential, "add"), {"kind": Credential.Kind.PASSWORD, "secret": SECRET}
    )
    assert response.status_code == 200
    assert SECRET not in response.content.decode()


def test_docker_tls_secret_must_be_json(staff_client: Client) -> None:
    response = staff_client.post(
        url(Credential, "add"),
        {"name": "tls2", "kind": Credential.Kind.DOCKER_TLS, "secret": SECRET},
    )
    page = response.content.decode()
    assert "must be a JSON object" in page
    assert SECRET not in page
    assert not Credential.objects.filter(name="tls2").exists()


def test_credential_change_keeps_or_replaces_secret(staff_client: Client, world: World) -> None:
    change = url(Credential, "change", world.credential.pk)
    form = {"name": "tls", "kind": Credential.Kind.PASSWORD, "username": "ops2"}
    assert staff_client.post(change, {**form, "secret": ""}).status_code == 302
    world.credential.refresh_from_db()
    assert world.credential.username == "ops2"
    assert world.credential.get_secret() == SECRET

    assert staff_client.post(change, {**form, "secret": "new\r\nsecret"}).status_code == 302
    world.credential.refresh_from_db()
    assert world.credential.get_secret() == "new\nsecret"


# --- history is read-only --------------------------------------------------------------------


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
    assert "Background state" in page and "/workspace/.sandhub/jobs/" in page
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
