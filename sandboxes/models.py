"""The product: sandboxes, the history of every command run in them, their previews, and the
links (file links, preview tokens) that open a part of one without a session."""

from __future__ import annotations

import secrets
import string

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from hosts.models import Host, Image
from tenants.models import Channel, Membership, Role, Team

_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_sandbox_id() -> str:
    return "sb_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


def new_pool_id() -> str:
    return "wp_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


def new_link_id() -> str:
    return "lnk_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


class InvalidTransition(Exception):
    pass


class SandboxStatus(models.TextChoices):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DELETED = "deleted"
    ERROR = "error"
    LOST = "lost"


S = SandboxStatus
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.STARTING, S.ERROR, S.STOPPING, S.DELETED}),
    S.STARTING: frozenset({S.RUNNING, S.ERROR, S.STOPPING, S.LOST}),
    S.RUNNING: frozenset({S.STOPPING, S.ERROR, S.LOST}),
    S.STOPPING: frozenset({S.STOPPED, S.DELETED, S.ERROR}),
    S.STOPPED: frozenset({S.STARTING, S.STOPPING, S.DELETED}),
    S.ERROR: frozenset({S.STOPPING, S.DELETED}),
    S.LOST: frozenset({S.STOPPING, S.DELETED}),
    S.DELETED: frozenset(),
}
# Statuses that hold resources on a host and count against a team's quota.
LIVE_STATUSES = frozenset({S.PENDING, S.STARTING, S.RUNNING, S.STOPPING})


class SandboxQuerySet(models.QuerySet):
    def visible(self):
        return self.exclude(status=SandboxStatus.DELETED)

    def live(self):
        return self.filter(status__in=LIVE_STATUSES)


class Sandbox(models.Model):
    public_id = models.CharField(max_length=32, unique=True, default=new_sandbox_id, editable=False)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="sandboxes")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="sandboxes"
    )
    host = models.ForeignKey(Host, null=True, on_delete=models.PROTECT, related_name="sandboxes")
    image = models.ForeignKey(Image, on_delete=models.PROTECT)
    name = models.CharField(max_length=100, blank=True)
    status = models.CharField(
        max_length=10, choices=SandboxStatus.choices, default=SandboxStatus.PENDING, db_index=True
    )
    status_message = models.TextField(blank=True)
    cpus = models.FloatField()
    memory_mb = models.PositiveIntegerField()
    pids_limit = models.PositiveIntegerField()
    # Size of /workspace in MB, from the team's quota at creation; null for sandboxes made
    # before disk limits existed.
    disk_mb = models.PositiveIntegerField(null=True, blank=True)
    env = models.JSONField(default=dict, blank=True)
    network = models.BooleanField(default=False)
    # The host's GPU indices given to this sandbox (CUDA_VISIBLE_DEVICES for its commands).
    gpus = models.JSONField(default=list, blank=True)
    backend_state = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_activity_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = SandboxQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["team", "status"], name="sandbox_team_status")]

    def __str__(self) -> str:
        return self.public_id

    def transition(self, new_status: str, message: str = "") -> None:
        """Move to new_status if the lifecycle allows it (the caller saves)."""
        if new_status == self.status:
            return
        if new_status not in ALLOWED_TRANSITIONS[self.status]:
            raise InvalidTransition(f"sandbox {self.public_id}: {self.status} -> {new_status}")
        self.status = new_status
        self.status_message = message
        now = timezone.now()
        if new_status == SandboxStatus.RUNNING:
            self.started_at = now
        elif new_status == SandboxStatus.DELETED:
            self.deleted_at = now

    def transition_if(self, new_status: str, message: str = "", still: Q | None = None) -> bool:
        """Compare-and-set: move to new_status only if the row is still as this instance saw it
        (status and message, and `still` when given) and the lifecycle allows it; saves.

        For changes that race with other processes (two sweepers claiming one sandbox, a
        reconciliation marking lost a sandbox being deleted): False when another got there
        first, and then neither the row nor this instance changes.
        """
        seen_status, seen_message = self.status, self.status_message
        seen = {"deleted_at": self.deleted_at, "started_at": self.started_at}
        self.transition(new_status, message)
        # Same status, new message: still a compare-and-set (a second sweeper claiming a
        # sandbox stuck in stopping loses on the message the first one wrote).
        self.status_message = message
        rows = Sandbox.objects.filter(pk=self.pk, status=seen_status, status_message=seen_message)
        if still is not None:
            rows = rows.filter(still)
        won = rows.update(
            status=self.status,
            status_message=self.status_message,
            started_at=self.started_at,
            deleted_at=self.deleted_at,
        )
        if not won:
            self.status, self.status_message = seen_status, seen_message
            self.deleted_at, self.started_at = seen["deleted_at"], seen["started_at"]
        return bool(won)


class CommandStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    ERROR = "error"


FINISHED_COMMAND_STATUSES = frozenset(
    {
        CommandStatus.SUCCEEDED,
        CommandStatus.FAILED,
        CommandStatus.TIMED_OUT,
        CommandStatus.CANCELLED,
        CommandStatus.ERROR,
    }
)


class CommandExecution(models.Model):
    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="commands")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    kind = models.CharField(max_length=20, default="command")  # command, python, pip, tests
    command = models.TextField()
    cwd = models.CharField(max_length=1000, default="/workspace")
    timeout_seconds = models.FloatField(default=60)
    status = models.CharField(
        max_length=10, choices=CommandStatus.choices, default=CommandStatus.QUEUED, db_index=True
    )
    exit_code = models.IntegerField(null=True, blank=True)
    stdout = models.TextField(blank=True)
    stderr = models.TextField(blank=True)
    stdout_truncated = models.BooleanField(default=False)
    stderr_truncated = models.BooleanField(default=False)
    stdout_bytes = models.BigIntegerField(default=0)
    stderr_bytes = models.BigIntegerField(default=0)
    error_message = models.TextField(blank=True)
    background = models.BooleanField(default=False)
    background_state = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"#{self.pk} in {self.sandbox.public_id}: {self.command[:60]}"


class WarmContainerStatus(models.TextChoices):
    PROVISIONING = "provisioning"
    READY = "ready"
    CLAIMED = "claimed"


class WarmContainer(models.Model):
    """One warm-pool member: a started, unowned sandbox container on a host, for an image.

    `pool_id` is the id written on the container and its volume at creation (Docker labels
    never change), so this row is what ties a claimed container to its sandbox: reconciliation
    keeps a container whose pool id belongs to a ready member or to a live sandbox's claim.
    `slot` (0..pool size - 1) is unique per host and image while the member is unclaimed, so
    concurrent refills cannot overfill a pool; a claim frees the slot (NULLs never collide).
    """

    pool_id = models.CharField(max_length=32, unique=True, default=new_pool_id, editable=False)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="warm_containers")
    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="warm_containers")
    slot = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(
        max_length=12,
        choices=WarmContainerStatus.choices,
        default=WarmContainerStatus.PROVISIONING,
        db_index=True,
    )
    backend_state = models.JSONField(default=dict, blank=True)
    sandbox = models.OneToOneField(
        Sandbox,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="warm_container",
        help_text="The sandbox that claimed this container.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["host", "image", "slot", "created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["host", "image", "slot"], name="one_warm_container_per_slot"
            )
        ]

    def __str__(self) -> str:
        return f"{self.pool_id} ({self.status})"


class PreviewQuerySet(models.QuerySet):
    def open(self):
        return self.filter(stopped_at__isnull=True)

    def stop(self, reason: str) -> int:
        """Mark the open ones stopped (their tokens die with them); how many were open."""
        return self.open().update(stopped_at=timezone.now(), stop_reason=reason[:200])

    def stop_where_sandbox_stopped(self) -> int:
        """Close open previews whose sandbox no longer runs (deleted, expired, idle, lost):
        the proxy serves none of them anyway; this keeps the record right."""
        stale = self.open().exclude(sandbox__status=SandboxStatus.RUNNING)
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
