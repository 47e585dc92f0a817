"""Sparklines as inline SVG, drawn on the server (no charting library, no script): the
points of a series over its time window, the top of its axis (the limit where there is one),
and the latest value as text. Used by the sandbox page, the hosts page and admin.

The SVG is styled by classes only (static/web/usage.css): the CSP forbids style attributes.
Each chart is an image to assistive technology (role="img") whose label says what it shows,
its latest value and its range, so nothing is only in the drawing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from sandboxes.contract.usage import HostMetrics, SandboxMetrics

WIDTH, HEIGHT = 240, 48
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


@dataclass(frozen=True)
class Chart:
    key: str  # an id part: chart-<key>
    title: str
    segments: list[str]  # polyline points; a gap (no value) splits the line
    latest: str  # the newest value as text, "—" without one
    axis_max: str  # what the top of the chart is
    label: str  # aria-label and <title>
    empty: bool
    dot: tuple[str, str] | None = None  # the newest point, marked (one sample is no line)
    width: int = WIDTH
    height: int = HEIGHT


def human_bytes(value: float | None) -> str:
    if value is None:
        return "—"
    size, unit = float(value), 0
    while size >= 1024 and unit < len(_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return (
        f"{size:.0f} {_UNITS[unit]}" if unit == 0 or size >= 100 else f"{size:.1f} {_UNITS[unit]}"
    )


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} %"


def count(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def chart(
    key: str,
    title: str,
    times: Sequence[datetime],
    values: Sequence[float | None],
    *,
    minutes: int,
    fmt: Callable[[float | None], str],
    limit: float | None = None,
    of: str | None = None,
    now: datetime | None = None,
) -> Chart:
    """A sparkline of `values` at `times` over the last `minutes`; its top is `limit` where
    there is one (a sandbox's memory limit), else the largest value (at least 1). `of` says
    what the latest value is out of (default: the limit, formatted; "" for nothing)."""
    now = now or timezone.now()
    start = now - timedelta(minutes=minutes)
    known = [v for v in values if v is not None]
    top = float(limit) if limit else max([*known, 1.0])
    segments: list[str] = []
    current: list[str] = []
    for at, value in zip(times, values, strict=True):
        if value is None:
            if current:
                segments.append(" ".join(current))
            current = []
            continue
        x = (at - start).total_seconds() / (minutes * 60) * WIDTH
        y = HEIGHT - min(max(value / top, 0.0), 1.0) * (HEIGHT - 2) - 1
        current.append(f"{max(0.0, min(x, WIDTH)):.1f},{y:.1f}")
    if current:
        segments.append(" ".join(current))
    last = current[-1].split(",") if current else None
    latest = fmt(known[-1]) if known else "—"
    of_limit = of if of is not None else (f" of {fmt(limit)}" if limit else "")
    span = f"{fmt(min(known))} to {fmt(max(known))}" if known else "no samples yet"
    label = f"{title}: {latest}{of_limit} now; last {minutes} minutes: {span}"
    if not known:
        label = f"{title}: no samples in the last {minutes} minutes"
    return Chart(
        key=key,
        title=title,
        segments=segments,
        latest=latest + of_limit,
        axis_max=fmt(top),
        label=label,
        empty=not known,
        dot=(last[0], last[1]) if last else None,
    )


def sandbox_charts(metrics: SandboxMetrics) -> list[Chart]:
    """CPU, memory, disk and pids of a sandbox, each against its limit."""
    series, limits, minutes = metrics.series, metrics.limits, metrics.minutes
    at = series.at
    return [
        chart(
            "cpu",
            "CPU",
            at,
            series.cpu_percent,
            minutes=minutes,
            fmt=percent,
            limit=100,
            of=f" of {limits.cpus:g} CPU" if limits.cpus else "",
        ),
        chart(
            "memory",
            "Memory",
            at,
            series.memory_bytes,
            minutes=minutes,
            fmt=human_bytes,
            limit=limits.memory_bytes,
        ),
        chart(
            "disk",
            "Disk",
            at,
            series.disk_used_bytes,
            minutes=minutes,
            fmt=human_bytes,
            limit=limits.disk_bytes,
        ),
        chart("pids", "Processes", at, series.pids, minutes=minutes, fmt=count, limit=limits.pids),
    ]


def host_charts(metrics: HostMetrics, prefix: str) -> list[Chart]:
    """CPU and memory of a host (GPU where it has one), in % of the host."""
    series, minutes = metrics.series, metrics.minutes
    made = [
        chart(
            f"{prefix}-cpu",
            "CPU",
            series.at,
            series.cpu_percent,
            minutes=minutes,
            fmt=percent,
            limit=100,
            of="",
        ),
        chart(
            f"{prefix}-memory",
            "Memory",
            series.at,
            series.memory_percent,
            minutes=minutes,
            fmt=percent,
            limit=100,
            of="",
        ),
    ]
    if any(v is not None for v in series.gpu_percent):
        made.append(
            chart(
                f"{prefix}-gpu",
                "GPU",
                series.at,
                series.gpu_percent,
                minutes=minutes,
                fmt=percent,
                limit=100,
                of="",
            )
        )
    return made
