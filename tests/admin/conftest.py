"""Fixtures of the Django admin's tests: a superuser, a client signed in as one, and a world
of one of each project model (tests/admin/helpers.py). The admin's `world` is its own, not
the live server's (tests/conftest.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from hosts.models import Credential, Host, Image
from sandboxes.models import CommandExecution, CommandStatus, Sandbox
from tenants import audit
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.admin.helpers import SECRET, World


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
