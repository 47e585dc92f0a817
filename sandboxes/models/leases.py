"""Liveness leases: each platform process (a web process, a qcluster worker) holds one row,
renewed by its heartbeat; the command rows it records carry it. A lease whose expiry (by the
database's clock) has passed belongs to a process that died, and its in-flight rows are closed
at once (sandboxes/housekeeping/liveness.py)."""

from __future__ import annotations

from django.db import models


class ProcessKind(models.TextChoices):
    WEB = "web"
    WORKER = "worker"


class LeaseEnd(models.TextChoices):
    RELEASED = "released"  # the process exited cleanly
    EXPIRED = "expired"  # it stopped renewing: killed, out of memory, its machine gone


class ProcessLease(models.Model):
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    kind = models.CharField(max_length=10, choices=ProcessKind.choices)
    started_at = models.DateTimeField()
    renewed_at = models.DateTimeField()
    # Set from the database's clock (renewed_at + SANDHUB_LEASE_SECONDS) and compared with it:
    # the nodes' own clocks never meet.
    expires_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    end = models.CharField(max_length=10, choices=LeaseEnd.choices, blank=True)
    # The django-q2 task a worker runs now (its id), to hand it back if the worker dies.
    task_id = models.CharField(max_length=64, blank=True)
    task_name = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.kind} pid {self.pid} on {self.hostname}"

    @property
    def holder(self) -> str:
        return f"pid {self.pid} on host {self.hostname}"
