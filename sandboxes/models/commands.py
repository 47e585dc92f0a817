"""The history of every command run in a sandbox."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from sandboxes.models.leases import ProcessLease
from sandboxes.models.sandbox import Sandbox
from tenants.models import Channel


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
    session = models.CharField(max_length=64, blank=True)  # run in this shell session
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
    # The liveness lease of the process recording it: closed at once if that process dies.
    lease = models.ForeignKey(
        ProcessLease, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"#{self.pk} in {self.sandbox.public_id}: {self.command[:60]}"
