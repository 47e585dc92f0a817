"""The results of usage metrics (sandboxes/services/usage.py): a sandbox's or a host's samples
as series (one list a measure, aligned on `at`), the latest values and the limits."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from sandboxes.contract.results import Result


class UsageSeries(Result):
    """The samples in time order; None where a sample could not tell."""

    at: list[datetime]
    cpu_percent: list[float | None] = Field(
        description="CPU use between a sample and the one before, % of the sandbox's CPU limit"
    )
    memory_bytes: list[int | None] = Field(description="memory without reclaimable page cache")
    disk_used_bytes: list[int | None] = Field(description="used in /workspace")
    pids: list[int | None] = Field(description="processes and threads")


class UsageValues(Result):
    at: datetime
    cpu_percent: float | None
    cpu_seconds: float | None = Field(description="CPU time used since the sandbox started")
    memory_bytes: int | None
    disk_used_bytes: int | None
    pids: int | None


class UsageLimits(Result):
    cpus: float | None = Field(description="CPU limit in cores")
    memory_bytes: int | None
    disk_bytes: int | None = Field(description="size of /workspace; null: no disk limit")
    pids: int | None


class SandboxMetrics(Result):
    """A sandbox's usage over the last `minutes` (a day at most is kept)."""

    sandbox_id: str
    status: str
    minutes: int
    interval_seconds: int = Field(description="how often the platform samples a sandbox")
    sampled_now: bool = Field(description="live: a sample was taken for this answer")
    latest: UsageValues | None = Field(description="the newest sample; null: none yet")
    limits: UsageLimits
    series: UsageSeries


class HostSeries(Result):
    at: list[datetime]
    cpu_percent: list[float | None]
    memory_percent: list[float | None]
    gpu_percent: list[float | None]
    sandboxes_running: list[int] | None = Field(
        description="every team's running sandboxes (platform admins only)"
    )


class HostMetrics(Result):
    """A host's load, one sample per probe, over the last `minutes`."""

    name: str
    minutes: int
    series: HostSeries
