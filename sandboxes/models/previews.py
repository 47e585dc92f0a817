"""Previews of a sandbox's ports, and the links (file links, preview tokens) that open a
part of one without a session."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from sandboxes.models.commands import CommandExecution
from sandboxes.models.ids import new_link_id
from sandboxes.models.sandbox import SERVED_STATUSES, Sandbox
from tenants.models import Membership, Role


class PreviewQuerySet(models.QuerySet):
    def open(self):
        return self.filter(stopped_at__isnull=True)

    def stop(self, reason: str) -> int:
        """Mark the open ones stopped (their tokens die with them); how many were open."""
        return self.open().update(stopped_at=timezone.now(), stop_reason=reason[:200])

    def stop_where_sandbox_stopped(self) -> int:
        """Close open previews whose sandbox is gone (deleted, expired, idle, lost): the
        proxy serves none of them anyway; this keeps the record right. A paused or stopped
        sandbox keeps its previews: a request to one resumes it."""
        stale = self.open().exclude(sandbox__status__in=SERVED_STATUSES)
        return stale.stop("its sandbox stopped")


class Preview(models.Model):
    """A port of a sandbox reachable through the platform (sandboxes/services/previews.py).

    Open while stopped_at is null: at most one open preview per sandbox and port. Its tokens
    name its id, so a stopped preview's tokens are dead even if the port is opened again.
    `command` is the background job deploy_app started for it, if any (stopped with it).
    """

    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="previews")
    port = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(65535)])
    public = models.BooleanField(
        default=False, help_text="Anyone with the address may open it (if the team allows)."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    stopped_at = models.DateTimeField(null=True, blank=True, db_index=True)
    stop_reason = models.CharField(max_length=200, blank=True)
    command = models.ForeignKey(
        CommandExecution,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="previews",
        help_text="The background command serving it (deploy_app).",
    )

    objects = PreviewQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["sandbox", "port"],
                condition=Q(stopped_at__isnull=True),
                name="one_open_preview_per_port",
            )
        ]

    def __str__(self) -> str:
        state = "open" if self.stopped_at is None else "stopped"
        return f"{self.sandbox.public_id}:{self.port} ({state})"


class LinkKind(models.TextChoices):
    FILE = "file"  # downloads one file of the sandbox
    PREVIEW = "preview"  # opens one preview (a port) of the sandbox


class AccessLinkQuerySet(models.QuerySet):
    def unexpired(self):
        """Neither revoked nor expired (whether its creator may still use it is for the
        service: sandboxes/services/access_links.py)."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())

    def ended_before(self, moment):
        """Revoked or expired before `moment` (the sweep deletes those kept long enough)."""
        return self.filter(Q(expires_at__lt=moment) | Q(revoked_at__lt=moment))


class AccessLink(models.Model):
    """A file link or a preview token: a secret that opens one part of a sandbox without a
    session, for whoever holds it (sandboxes/services/access_links.py).

    Only the secret's SHA-256 is kept; the token handed out is random and says nothing.
    `public_id` names the link for people (lists, revocation, the audit log). A link acts for
    its creator's membership: deleted with it (a member removed and added back has a new
    membership and makes new links), and usable only while that membership's role is at
    least `min_role`. A preview token dies with its preview (a stopped preview stays a row,
    and the token names that row), a file link with its sandbox.
    """

    public_id = models.CharField(max_length=32, unique=True, default=new_link_id, editable=False)
    kind = models.CharField(max_length=8, choices=LinkKind.choices)
    secret_hash = models.CharField(max_length=64, unique=True, editable=False)
    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="links")
    membership = models.ForeignKey(
        Membership,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="The creator's membership: the link goes with it.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    path = models.TextField(blank=True, help_text="The file a file link downloads.")
    preview = models.ForeignKey(
        Preview, null=True, blank=True, on_delete=models.CASCADE, related_name="links"
    )
    port = models.PositiveIntegerField(null=True, blank=True)
    min_role = models.CharField(
        max_length=10,
        choices=Role.choices,
        help_text="The role its creator must still hold in the team when it is used.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    revoked_at = models.DateTimeField(null=True, blank=True, db_index=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = AccessLinkQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["sandbox", "expires_at"], name="link_sandbox_expiry")]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(kind=LinkKind.FILE, preview__isnull=True) & ~Q(path="")
                    | Q(kind=LinkKind.PREVIEW, preview__isnull=False, port__isnull=False)
                ),
                name="link_names_its_target",
            )
        ]

    def __str__(self) -> str:
        target = self.path if self.kind == LinkKind.FILE else f"port {self.port}"
        return f"{self.public_id} ({self.kind}: {target})"
