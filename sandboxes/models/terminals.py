"""Terminals (a PTY a person types in, in the browser) and shell sessions (an agent's named,
long-lived shell for run_command(session=...)): one row each, open while closed_at is null.
The process itself is held in the sandbox (hosts/backends/interactive.py); this row is who
opened it, where, and when it ended, and its id is what the browser's URL names."""

from __future__ import annotations

import secrets
import string

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from sandboxes.models.sandbox import Sandbox
from tenants.models import Channel

_ALPHABET = string.ascii_lowercase + string.digits
# The backend's ids are [a-z0-9-] and shared by both kinds in a sandbox: the prefixes keep a
# terminal's random id and a session's backend name apart whatever name an agent picks.
TERMINAL_PREFIX, SHELL_PREFIX = "tm-", "sh-"


def new_terminal_id() -> str:
    """Random and unguessable (about 150 bits): it is in the terminal page's URL."""
    return TERMINAL_PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(29))


class TerminalKind(models.TextChoices):
    TERMINAL = "terminal"
    SHELL = "shell"


class TerminalQuerySet(models.QuerySet):
    def open(self):
        return self.filter(closed_at__isnull=True)

    def close(self, reason: str) -> int:
        """Mark the open ones closed; how many were open."""
        return self.open().update(closed_at=timezone.now(), close_reason=reason[:200])


class Terminal(models.Model):
    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="terminals")
    terminal_id = models.CharField(max_length=64, unique=True, default=new_terminal_id)
    kind = models.CharField(max_length=10, choices=TerminalKind.choices)
    name = models.CharField(max_length=64, blank=True, help_text="a shell session's name")
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.CharField(max_length=40, blank=True, help_text="the key's public prefix")
    channel = models.CharField(max_length=10, choices=Channel.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True, db_index=True)
    close_reason = models.CharField(max_length=200, blank=True)

    objects = TerminalQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["sandbox", "name"],
                condition=Q(kind="shell", closed_at__isnull=True),
                name="one_open_shell_session_per_name",
            )
        ]

    @property
    def backend_id(self) -> str:
        """The id the sandbox's holder goes by."""
        return self.terminal_id if self.kind == TerminalKind.TERMINAL else SHELL_PREFIX + self.name

    def __str__(self) -> str:
        return f"{self.kind} {self.name or self.terminal_id} in {self.sandbox.public_id}"
