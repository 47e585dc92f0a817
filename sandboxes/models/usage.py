"""Usage over time: a sample of each running sandbox (its cgroup and disk, taken by the
sampling task, sandboxes/housekeeping/usage.py) and of each host (its probe). A day is kept
(SANDHUB_USAGE_KEEP_HOURS); older rows are pruned by the same task."""

from __future__ import annotations

from django.db import models

from hosts.models import Host
from sandboxes.models.sandbox import Sandbox


class UsageSample(models.Model):
    """One sandbox at one moment. cpu_percent is of the sandbox's CPU limit (100 = all its
    cores busy), from the CPU time since the sample before; None on a first sample. Any
    value the sandbox could not tell is None."""

    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="usage_samples")
    at = models.DateTimeField()
    cpu_seconds = models.FloatField(null=True, blank=True)  # cumulative: the next one's base
    cpu_percent = models.FloatField(null=True, blank=True)
    cpu_limit = models.FloatField(null=True, blank=True)  # cores
    memory_bytes = models.BigIntegerField(null=True, blank=True)
    memory_limit_bytes = models.BigIntegerField(null=True, blank=True)
    disk_used_bytes = models.BigIntegerField(null=True, blank=True)
    disk_limit_bytes = models.BigIntegerField(null=True, blank=True)
    pids = models.IntegerField(null=True, blank=True)
    pids_limit = models.IntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["sandbox", "at"], name="usage_sandbox_at"),
            models.Index(fields=["at"], name="usage_at"),  # each round's prune
        ]
        ordering = ["at"]

    def __str__(self) -> str:
        return f"{self.sandbox_id} at {self.at:%Y-%m-%d %H:%M:%S}"


class HostUsageSample(models.Model):
    """One host at one probe: its load as the probe read it, and how many sandboxes ran."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="usage_samples")
    at = models.DateTimeField()
    cpu_percent = models.FloatField(null=True, blank=True)
    memory_percent = models.FloatField(null=True, blank=True)
    gpu_percent = models.FloatField(null=True, blank=True)
    sandboxes_running = models.IntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["host", "at"], name="host_usage_host_at"),
            models.Index(fields=["at"], name="host_usage_at"),
        ]
        ordering = ["at"]

    def __str__(self) -> str:
        return f"{self.host_id} at {self.at:%Y-%m-%d %H:%M:%S}"
