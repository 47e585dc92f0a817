"""Sandboxes and their lifecycle: the statuses and the transitions allowed between them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from hosts.models import Host, Image
from sandboxes.models.ids import new_sandbox_id
from tenants.models import Team


class InvalidTransition(Exception):
    pass


class SandboxStatus(models.TextChoices):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    # Pause freezes its processes and keeps their memory; stop ends them and keeps only the
    # files. The -ing statuses are claims: a request moved the row there (compare-and-set)
    # and is calling the host; exactly one request holds a sandbox in one of them.
    PAUSING = "pausing"
    PAUSED = "paused"
    RESUMING = "resuming"
    HALTING = "halting"  # being stopped (files kept); "stopping" means being deleted
    STOPPED = "stopped"
    STOPPING = "stopping"
    DELETED = "deleted"
    ERROR = "error"
    LOST = "lost"


S = SandboxStatus
# Where a pause, resume or stop that failed half-way lands: what the host says it is.
_SETTLED = frozenset({S.RUNNING, S.PAUSED, S.STOPPED, S.ERROR, S.LOST, S.STOPPING})
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.STARTING, S.ERROR, S.STOPPING, S.DELETED}),
    S.STARTING: frozenset({S.RUNNING, S.ERROR, S.STOPPING, S.LOST}),
    S.RUNNING: frozenset({S.STOPPING, S.ERROR, S.LOST, S.PAUSING, S.HALTING}),
    S.PAUSING: _SETTLED,
    S.PAUSED: frozenset({S.RESUMING, S.HALTING, S.STOPPING, S.ERROR, S.LOST}),
    S.RESUMING: _SETTLED,
    S.HALTING: _SETTLED,
    S.STOPPING: frozenset({S.STOPPED, S.DELETED, S.ERROR}),
    S.STOPPED: frozenset({S.STARTING, S.RESUMING, S.STOPPING, S.DELETED, S.ERROR, S.LOST}),
    S.ERROR: frozenset({S.STOPPING, S.DELETED}),
    S.LOST: frozenset({S.STOPPING, S.DELETED}),
    S.DELETED: frozenset(),
}
# Statuses that hold CPU on a host and count against a team's running quota: running, on
# the way there or out (a pause or stop holds it until the host is done).
LIVE_STATUSES = frozenset(
    {S.PENDING, S.STARTING, S.RUNNING, S.STOPPING, S.PAUSING, S.RESUMING, S.HALTING}
)
# Memory held, CPU not: the paused quota (count and memory) counts these.
PAUSED_STATUSES = frozenset({S.PAUSING, S.PAUSED})
# Disk only: the stopped quota counts these.
STOPPED_STATUSES = frozenset({S.HALTING, S.STOPPED})
# What a call on the sandbox resumes first (sandboxes/services/lifecycle.py).
RESUMABLE_STATUSES = frozenset({S.PAUSED, S.STOPPED})
# Claims of a pause, resume or stop in flight (see SandboxStatus).
CHANGING_STATUSES = frozenset({S.PAUSING, S.RESUMING, S.HALTING})
# Running, or to be resumed by the next call: previews and file links keep working.
SERVED_STATUSES = frozenset({S.RUNNING}) | RESUMABLE_STATUSES | CHANGING_STATUSES
# Still on its host in some form (container or directory): not deleted, failed or lost.
KEPT_STATUSES = LIVE_STATUSES | PAUSED_STATUSES | STOPPED_STATUSES


class SandboxQuerySet(models.QuerySet):
    def visible(self):
        return self.exclude(status=SandboxStatus.DELETED)

    def live(self):
        return self.filter(status__in=LIVE_STATUSES)

    def paused(self):
        return self.filter(status__in=PAUSED_STATUSES)

    def stopped(self):
        return self.filter(status__in=STOPPED_STATUSES)


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
    # Labels its creator gives (string keys and values): lists can be filtered by them.
    metadata = models.JSONField(default=dict, blank=True)
    network = models.BooleanField(default=False)  # egress_mode != "off"
    # Egress (issue 27): off, allowlist or public; the allow-list it got (rule strings, the
    # team's at creation or a narrower one asked for); its credential towards the proxy.
    egress_mode = models.CharField(max_length=10, default="off")
    egress_allow = models.JSONField(default=list, blank=True)
    egress_token = models.CharField(max_length=64, blank=True, editable=False)
    # The host's GPU indices given to this sandbox (CUDA_VISIBLE_DEVICES for its commands).
    gpus = models.JSONField(default=list, blank=True)
    backend_state = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_activity_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # When the status last changed: how long a sandbox has been paused or stopped (the
    # team's idle policy), and a claim (pausing, ...) left by a process that died.
    status_changed_at = models.DateTimeField(null=True, blank=True)
    # The lifetime asked for, and when it started counting (creation, or the last resume
    # that gave a fresh one under the team's pause policy): expiry and its extensions count
    # from there. Null on rows made before pause existed (created_at, expires_at say it).
    lifetime_minutes = models.PositiveIntegerField(null=True, blank=True)
    lifetime_started_at = models.DateTimeField(null=True, blank=True)
    # The client's id for the request that created it (create_sandbox's request_id): a retry
    # with the same id gets this sandbox again. Unique per team; the digest of the request's
    # arguments tells a retry from a reuse of the id for something else.
    request_id = models.CharField(max_length=100, null=True, blank=True, editable=False)
    request_digest = models.CharField(max_length=64, blank=True, editable=False)

    objects = SandboxQuerySet.as_manager()

    class Meta:
        # Not Django's "sandboxs" (sidebar, breadcrumbs, the delete action's name).
        verbose_name_plural = "sandboxes"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["team", "status"], name="sandbox_team_status")]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "request_id"],
                condition=Q(request_id__isnull=False),
                name="one_sandbox_per_team_request",
            )
        ]

    # How long the call that read this row waited for the sandbox to resume (not stored:
    # set by sandboxes/services/lifecycle.py for the results of that call).
    resumed_seconds: float | None = None

    def __str__(self) -> str:
        return self.public_id

    @property
    def paused_at(self):
        return self.status_changed_at if self.status == SandboxStatus.PAUSED else None

    @property
    def stopped_at(self):
        return self.status_changed_at if self.status == SandboxStatus.STOPPED else None

    def transition(self, new_status: str, message: str = "") -> None:
        """Move to new_status if the lifecycle allows it (the caller saves)."""
        if new_status == self.status:
            return
        if new_status not in ALLOWED_TRANSITIONS[self.status]:
            raise InvalidTransition(f"sandbox {self.public_id}: {self.status} -> {new_status}")
        self.status = new_status
        self.status_message = message
        now = timezone.now()
        self.status_changed_at = now
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
        seen = {
            "deleted_at": self.deleted_at,
            "started_at": self.started_at,
            "status_changed_at": self.status_changed_at,
        }
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
            status_changed_at=self.status_changed_at,
        )
        if not won:
            self.status, self.status_message = seen_status, seen_message
            self.deleted_at, self.started_at = seen["deleted_at"], seen["started_at"]
            self.status_changed_at = seen["status_changed_at"]
        return bool(won)
