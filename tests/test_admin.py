"""Django admin: every model renders, secrets stay write-only, history stays read-only. The
host, sandbox and background actions are in test_admin_actions.py, SSH hosts in
test_admin_ssh.py; both use the fixtures here."""

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
from django.test import Client, RequestFactory
from django.urls import reverse

from hosts.models import Credential, Host, Image
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
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
