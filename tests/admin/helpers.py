"""Helpers of the Django admin's tests: the world the `world` fixture makes
(tests/admin/conftest.py), admin URLs, actions and messages. Not a test module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.messages import get_messages
from django.db import models
from django.test import Client
from django.urls import reverse

from hosts.models import Credential, Host, Image
from sandboxes.models import CommandExecution, Sandbox
from tenants.models import AuditLog, Membership, Team

SECRET = "correct-horse-battery-staple-4711"


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


def url(model: type[models.Model] | models.Model, view: str, *args: Any) -> str:
    meta = model._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{view}", args=args)


def action(client: Client, model: type[models.Model], name: str, pks: list[int], **extra):
    data = {"action": name, ACTION_CHECKBOX_NAME: [str(pk) for pk in pks], **extra}
    return client.post(url(model, "changelist"), data)


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]
