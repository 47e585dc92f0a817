"""Load of an SSH host from the text it prints: pure functions, no network, no database.

One round trip per probe: the backend runs PROBE_COMMAND over its connection and hands the
output to parse_probe_output(); the pieces are public so each is tested on real /proc files and
real nvidia-smi outputs. Choices: cpu is the busy share of jiffies between two /proc/stat
readings, iowait counting as idle; memory is MemTotal - MemAvailable; a GPU figure nvidia-smi
cannot give ("[N/A]", "[Not Supported]") is None, never 0; the idle score weighs the free
shares of cpu, memory and gpu 0.4 / 0.4 / 0.2 (the seed's weights), and 0.5 / 0.5 on a host
without GPUs, which is not handed the gpu share for free.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hosts.backends.gpus import (
    GPU_FIELDS as GPU_FIELDS,
)
from hosts.backends.gpus import (
    GPU_QUERY as GPU_QUERY,
)
from hosts.backends.gpus import (
    GpuUse as GpuUse,
)

# Re-exported: the probe parses and reports GPUs with them (gpus.py, shared by every kind).
from hosts.backends.gpus import (
    NotEnoughGpus as NotEnoughGpus,
)
from hosts.backends.gpus import (
    cuda_visible_devices as cuda_visible_devices,
)
from hosts.backends.gpus import (
    gpu_busy_percent as gpu_busy_percent,
)
from hosts.backends.gpus import (
    gpu_environment as gpu_environment,
)
from hosts.backends.gpus import (
    gpu_pick_cost as gpu_pick_cost,
)
from hosts.backends.gpus import (
    parse_gpus as parse_gpus,
)
from hosts.backends.gpus import (
    pick_gpus as pick_gpus,
)

GPU_TIMEOUT_SECONDS = 10  # a wedged driver can hang nvidia-smi; the probe must still answer
PROBE_INTERVAL = 0.2  # seconds between the two /proc/stat readings

_CPU_WEIGHT, _MEMORY_WEIGHT, _GPU_WEIGHT = 0.4, 0.4, 0.2

# Section markers: a line of their own, which no /proc file or nvidia-smi line looks like.
_MARK_RE = re.compile(r"^@@sandhub-probe ([a-z0-9-]+)@@$")

# POSIX sh (dash, busybox ash). Whatever a login script prints before the first marker is
# ignored; the "end" marker tells a complete output from one cut short.
PROBE_SCRIPT = f"""\
export LC_ALL=C
m() {{ echo "@@sandhub-probe $1@@"; }}
m stat1; grep '^cpu ' /proc/stat
sleep {PROBE_INTERVAL} 2>/dev/null || sleep 1
m stat2; grep '^cpu ' /proc/stat
m ncpu; grep -c '^cpu[0-9]' /proc/stat
m meminfo; cat /proc/meminfo
m loadavg; cat /proc/loadavg
if command -v nvidia-smi >/dev/null 2>&1; then
  t=; command -v timeout >/dev/null 2>&1 && t="timeout {GPU_TIMEOUT_SECONDS}"
  m gpu; $t {GPU_QUERY} 2>/dev/null; rc=$?
  m gpu-exit; echo "$rc"
fi
m end
"""
# The login shell may be bash, zsh or fish: the script always runs under sh.
PROBE_COMMAND = f"sh -c {shlex.quote(PROBE_SCRIPT)}"


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies since boot from /proc/stat's `cpu ` line: all of them, and the idle ones."""

    total: int
    idle: int


def cpu_times(proc_stat: str) -> CpuTimes:
    """CpuTimes from /proc/stat (the whole file, or its `cpu ` line)."""
    line = next((ln for ln in proc_stat.splitlines() if ln.startswith("cpu ")), None)
    if line is None:
        raise ValueError("no 'cpu ' line in the /proc/stat output")
    try:
        ticks = [int(value) for value in line.split()[1:]]
    except ValueError:
        raise ValueError(f"malformed /proc/stat cpu line: {line!r}") from None
    if len(ticks) < 4:
        raise ValueError(f"/proc/stat cpu line has fewer than 4 counters: {line!r}")
    # user nice system idle iowait irq softirq steal; guest and guest_nice (9th, 10th) are
    # already counted in user and nice, so they are left out of the total.
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return CpuTimes(total=sum(ticks[:8]), idle=idle)


def cpu_percent(before: CpuTimes, after: CpuTimes) -> float:
    """Busy share of the time between two readings, 0-100; no time elapsed gives 0.0."""
    elapsed = after.total - before.total
    if elapsed <= 0:
        return 0.0
    busy = elapsed - (after.idle - before.idle)
    return round(_clamp(busy / elapsed * 100), 1)


def _meminfo(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        parts = rest.split()
        if colon and parts and parts[0].isdigit():
            values[name.strip()] = int(parts[0])  # kB
    return values


def memory_percent(meminfo: str) -> float:
    """Share of memory in use (0-100) from /proc/meminfo."""
    values = _meminfo(meminfo)
    total = values.get("MemTotal", 0)
    if total <= 0:
        raise ValueError("no MemTotal in the /proc/meminfo output")
    available = values.get("MemAvailable")
    if available is None:  # before Linux 3.14: page cache and buffers can be reclaimed
        available = sum(values.get(name, 0) for name in ("MemFree", "Buffers", "Cached"))
    return round(_clamp((total - available) / total * 100), 1)


def load_average(loadavg: str) -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages from /proc/loadavg."""
    parts = loadavg.split()
    try:
        return float(parts[0]), float(parts[1]), float(parts[2])
    except (IndexError, ValueError):
        raise ValueError(f"malformed /proc/loadavg: {loadavg.strip()[:200]!r}") from None


def idle_score(
    cpu_percent: float, memory_percent: float, gpu_percent: float | None = None
) -> float:
    """1 for an idle host, 0 for a saturated one: 0.4 cpu + 0.4 memory + 0.2 gpu free
    shares; without GPUs (gpu_percent None) cpu and memory weigh 0.5 each."""
    weighted = [(_CPU_WEIGHT, cpu_percent), (_MEMORY_WEIGHT, memory_percent)]
    if gpu_percent is not None:
        weighted.append((_GPU_WEIGHT, gpu_percent))
    free = sum(weight * (1 - _clamp(p) / 100) for weight, p in weighted)
    return round(free / sum(weight for weight, _ in weighted), 3)


@dataclass(frozen=True)
class HostSample:
    """One probe of a host: the backend fills ProbeResult's figures and details from it."""

    cpu_percent: float
    memory_percent: float
    load: tuple[float, float, float]
    cpu_count: int | None
    memory_total_mib: int
    gpus: tuple[GpuUse, ...]
    gpu_percent: float | None  # None: no GPUs (or nvidia-smi failed: see gpu_error)
    idle_score: float
    gpu_error: str = ""

    def details(self) -> dict[str, Any]:
        return {
            "load": list(self.load),
            "cpu_count": self.cpu_count,
            "memory_total_mib": self.memory_total_mib,
            "idle_score": self.idle_score,
            "gpu_count": len(self.gpus),
            "gpus": [gpu.as_dict() for gpu in self.gpus],
            "gpu_error": self.gpu_error,
        }


def summarize(
    stat_before: str,
    stat_after: str,
    meminfo: str,
    loadavg: str,
    gpu_csv: str | None = None,
    *,
    cpu_count: int | None = None,
    assigned: Mapping[int, int] | None = None,
) -> HostSample:
    """A HostSample from the raw texts; gpu_csv None: the host has no nvidia-smi."""
    cpu = cpu_percent(cpu_times(stat_before), cpu_times(stat_after))
    memory = memory_percent(meminfo)
    gpus = tuple(parse_gpus(gpu_csv)) if gpu_csv is not None else ()
    gpu = gpu_busy_percent(gpus, assigned)
    return HostSample(
        cpu_percent=cpu,
        memory_percent=memory,
        load=load_average(loadavg),
        cpu_count=cpu_count,
        memory_total_mib=_meminfo(meminfo).get("MemTotal", 0) // 1024,
        gpus=gpus,
        gpu_percent=gpu,
        idle_score=idle_score(cpu, memory, gpu),
    )


def parse_probe_output(text: str, assigned: Mapping[int, int] | None = None) -> HostSample:
    """A HostSample from what PROBE_SCRIPT printed. A missing section or an output cut short
    is a ValueError. nvidia-smi failing or printing what cannot be read is not: the host is
    sampled without GPUs and gpu_error says why, since its cpu and memory are still good."""
    sections = _sections(text)
    for name in ("stat1", "stat2", "meminfo", "loadavg", "end"):
        if name not in sections:
            raise ValueError(f"probe output has no {name!r} section (cut short?)")
    gpu_csv, gpu_error = _gpu_section(sections)
    if gpu_csv is not None:
        try:
            parse_gpus(gpu_csv)
        except ValueError as exc:
            gpu_csv, gpu_error = None, str(exc)[:500]
    ncpu = sections.get("ncpu", "").strip()
    cpus = int(ncpu) if ncpu.isdigit() and int(ncpu) > 0 else None
    stat1, stat2, meminfo, loadavg = (sections[k] for k in ("stat1", "stat2", "meminfo", "loadavg"))
    sample = summarize(stat1, stat2, meminfo, loadavg, gpu_csv, cpu_count=cpus, assigned=assigned)
    return dataclasses.replace(sample, gpu_error=gpu_error)


def _sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None  # text before the first marker is a login banner
    for line in text.splitlines():
        marker = _MARK_RE.match(line.strip())
        if marker:
            current = sections.setdefault(marker.group(1), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def _gpu_section(sections: Mapping[str, str]) -> tuple[str | None, str]:
    """(nvidia-smi's CSV or None, why there is none)."""
    if "gpu" not in sections:
        return None, ""
    code = sections.get("gpu-exit", "").strip()
    if code == "0":
        return sections["gpu"], ""
    if code == "124":
        return None, f"nvidia-smi timed out after {GPU_TIMEOUT_SECONDS} s"
    said = next((ln.strip() for ln in sections["gpu"].splitlines() if ln.strip()), "")
    error = f"nvidia-smi failed (exit {code or '?'})"
    return None, f"{error}: {said[:300]}" if said else error


def _clamp(percent: float) -> float:
    return max(0.0, min(100.0, percent))
