"""Snapshots: a sandbox's files kept under a name, to start new sandboxes from (forks).

What a snapshot holds depends on the host's kind (hosts/backends/*/snapshots.py): on Docker
the workspace (a copy of its disk, or a tar where the engine is remote) and the home
directory (where `pip install --user` puts packages); on SSH hosts the workspace (a copy of
an isolated sandbox's disk, or of its directory). Its bytes live on `host`;
`backend_state` is what that host's backend needs to find them again (as
Sandbox.backend_state is). A new sandbox from it starts on a host of the same kind, with its
image and limits unless told otherwise.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from hosts.models import Host, Image
from sandboxes.models.ids import new_snapshot_id
from sandboxes.models.sandbox import Sandbox
from tenants.models import Team


class SnapshotStatus(models.TextChoices):
    CREATING = "creating"  # its bytes are being copied
    READY = "ready"
    ERROR = "error"  # taking or removing it failed (status_message says why)
    DELETING = "deleting"
    DELETED = "deleted"  # its bytes are gone; the row stays as history


# Statuses that hold (or may hold) bytes on a host and count against the team's quotas.
LIVE_SNAPSHOT_STATUSES = frozenset(
    {SnapshotStatus.CREATING, SnapshotStatus.READY, SnapshotStatus.ERROR, SnapshotStatus.DELETING}
)


class SnapshotQuerySet(models.QuerySet):
    def live(self):
        return self.filter(status__in=LIVE_SNAPSHOT_STATUSES)


class Snapshot(models.Model):
    public_id = models.CharField(
        max_length=32, unique=True, default=new_snapshot_id, editable=False
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="snapshots")
    name = models.CharField(max_length=100)
    source = models.ForeignKey(
        Sandbox,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="snapshots",
        help_text="The sandbox it was taken from.",
    )
    host_kind = models.CharField(max_length=10, help_text="New sandboxes from it need this kind.")
    host = models.ForeignKey(
        Host,
        on_delete=models.PROTECT,
        related_name="snapshots",
        help_text="Where its bytes live.",
    )
    backend_state = models.JSONField(default=dict, blank=True)
    size_bytes = models.BigIntegerField(default=0, help_text="What it takes on its host's disk.")
    status = models.CharField(
        max_length=10,
        choices=SnapshotStatus.choices,
        default=SnapshotStatus.CREATING,
        db_index=True,
    )
    status_message = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # The source's image and limits: a sandbox made from it gets these unless it asks.
    image = models.ForeignKey(Image, on_delete=models.PROTECT, related_name="+")
    cpus = models.FloatField()
    memory_mb = models.PositiveIntegerField()
    disk_mb = models.PositiveIntegerField(null=True, blank=True)
    network = models.BooleanField(default=False)
    # The source's egress mode and allow-list ("": made before egress modes; network says).
    egress_mode = models.CharField(max_length=10, blank=True)
    egress_allow = models.JSONField(default=list, blank=True)

    objects = SnapshotQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name"],
                condition=~Q(status="deleted"),
                name="snapshot_name_unique_per_team",
            )
        ]

    def __str__(self) -> str:
        return f"{self.public_id} ({self.name})"
