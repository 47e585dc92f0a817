"""Egress (issue 27): secrets bound to destinations, the connections the proxy refused, and
the deployment's CA that signs the certificates of the hosts a secret is bound to.

EgressSecret lives here rather than beside the team in tenants: its value is encrypted with
hosts.crypto, which tenants (below the hosts layer) may not import.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from sandboxes.models.sandbox import Sandbox
from tenants.models import Team


def new_placeholder() -> str:
    """What a sandbox sees instead of a secret's value: random, so it cannot be guessed and
    tells nothing about the value."""
    return "sandhub-secret-" + secrets.token_hex(16)


class EgressSecret(models.Model):
    """A secret the proxy adds to requests to its hosts; the sandbox sees only the placeholder.

    user: the member it is for (his sandboxes only); null: every sandbox of the team.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="egress_secrets")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="egress_secrets",
    )
    name = models.CharField(max_length=100, help_text="The environment variable's name.")
    hosts = models.JSONField(default=list, help_text='Patterns: "api.openai.com", "*.x.com".')
    header = models.CharField(max_length=100, default="Authorization")
    template = models.CharField(max_length=200, default="Bearer {value}")
    value_encrypted = models.TextField(editable=False)
    placeholder = models.CharField(max_length=64, unique=True, default=new_placeholder)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            # One name per scope: a team-wide secret and a user's own may share a name (the
            # user's wins in his sandboxes).
            models.UniqueConstraint(
                fields=["team", "user", "name"], name="egress_secret_name_per_user"
            ),
            models.UniqueConstraint(
                fields=["team", "name"],
                condition=models.Q(user__isnull=True),
                name="egress_secret_name_per_team",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.team}{'' if self.user_id is None else ', own'})"

    def __repr__(self) -> str:  # never the value
        return f"<EgressSecret {self.pk} {self.name} team={self.team_id} user={self.user_id}>"


class EgressRefusal(models.Model):
    """Connections of a sandbox the proxy refused, counted per destination and reason (not a
    row per attempt)."""

    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="egress_refusals")
    destination = models.CharField(max_length=300)  # "name:port" or "address:port"
    reason = models.CharField(max_length=100)
    count = models.PositiveBigIntegerField(default=0)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()

    class Meta:
        ordering = ["-count", "destination"]
        constraints = [
            models.UniqueConstraint(
                fields=["sandbox", "destination", "reason"], name="one_refusal_row_per_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.sandbox_id} {self.destination} {self.reason} x{self.count}"


class EgressAuthority(models.Model):
    """The deployment's CA (one row), made on first use; its key encrypted with hosts.crypto."""

    name = models.CharField(max_length=50, unique=True, default="default")
    cert_pem = models.TextField()
    key_encrypted = models.TextField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "egress authorities"

    def __str__(self) -> str:
        return f"egress CA {self.name}"
