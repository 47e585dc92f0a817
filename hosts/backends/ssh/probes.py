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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The exact nvidia-smi query the backend runs (the fixtures *-query-gpu.csv are its output).
_GPU_COLUMNS = (
    "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "temperature.gpu,power.draw"
)
GPU_FIELDS: tuple[str, ...] = tuple(_GPU_COLUMNS.split(","))
GPU_QUERY = f"nvidia-smi --query-gpu={_GPU_COLUMNS} --format=csv,noheader,nounits"
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


class NotEnoughGpus(ValueError):
    """More GPUs were asked of a host than it has."""


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


@dataclass(frozen=True)
class GpuUse:
    """One GPU as nvidia-smi reports it; None is a figure the driver did not give."""

    index: int
    uuid: str = ""
    name: str = ""
    utilization_percent: float | None = None
    # utilization.memory: how busy the memory bus was, not how full the memory is.
    memory_activity_percent: float | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None

    @property
    def memory_percent(self) -> float | None:
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return round(_clamp(self.memory_used_mib / self.memory_total_mib * 100), 1)

    @property
    def busy_percent(self) -> float:
        """max(utilization, memory in use): full memory makes a GPU as unusable as busy
        cores. Unknown figures are left out, none known reads as 0: what Sandhub assigned
        itself is ranked before this, and catches what it placed there."""
        known = [v for v in (self.utilization_percent, self.memory_percent) if v is not None]
        return max(known, default=0.0)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for ProbeResult.details and the Host row; from_dict reads it back."""
        derived = {"memory_percent": self.memory_percent, "busy_percent": self.busy_percent}
        return dataclasses.asdict(self) | derived

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuUse:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def parse_gpus(csv_text: str) -> list[GpuUse]:
    """GPUs from GPU_QUERY's output; blank lines are skipped, a bad line is a ValueError.
    Also reads `--format=csv` (a header line, units): columns are then taken by name."""
    lines = [line for line in csv_text.splitlines() if line.strip()]
    header = _header_fields(lines[0]) if lines else None
    rows = lines[1:] if header else lines
    return [_gpu_line(line, header or GPU_FIELDS) for line in rows]


_HEADER_CELL = re.compile(r"^([a-z_.]+)(?: \[[^\]]*\])?$")


def _header_fields(line: str) -> tuple[str, ...] | None:
    """The field names of a header line (`index, memory.used [MiB]`), None for a data line."""
    matches = [_HEADER_CELL.match(cell.strip()) for cell in line.split(",")]
    if not all(matches):
        return None
    fields = tuple(m.group(1) for m in matches if m)
    if "index" not in fields:
        raise ValueError(f"nvidia-smi header without an index column: {line!r}")
    return fields


def _gpu_line(line: str, fields: Sequence[str]) -> GpuUse:
    cells = [cell.strip() for cell in line.split(",")]
    extra = len(cells) - len(fields)
    if extra > 0 and "name" in fields:  # the name is the one free-text column: give it back
        at = fields.index("name")
        cells[at : at + extra + 1] = [", ".join(cells[at : at + extra + 1])]
    if len(cells) != len(fields):
        expected = f"{len(fields)} ({','.join(fields)})"
        raise ValueError(f"nvidia-smi line has {len(cells)} fields, expected {expected}: {line!r}")
    row = dict(zip(fields, cells, strict=True))
    try:
        return GpuUse(
            index=int(row["index"]),
            uuid=row.get("uuid", ""),
            name=row.get("name", ""),
            utilization_percent=_number(row.get("utilization.gpu")),
            memory_activity_percent=_number(row.get("utilization.memory")),
            memory_used_mib=_whole(row.get("memory.used")),
            memory_total_mib=_whole(row.get("memory.total")),
            temperature_c=_number(row.get("temperature.gpu")),
            power_draw_w=_number(row.get("power.draw")),
        )
    except ValueError as exc:
        raise ValueError(f"malformed nvidia-smi line {line!r}: {exc}") from None


def _number(cell: str | None) -> float | None:
    """A figure, its unit dropped (`14 %` -> 14.0); "[N/A]", "[Not Supported]", "N/A" -> None."""
    if cell is None or cell.startswith("[") or cell.upper() == "N/A":
        return None
    try:
        return float(cell.split()[0])
    except (IndexError, ValueError):
        raise ValueError(f"not a number: {cell!r}") from None


def _whole(cell: str | None) -> int | None:
    value = _number(cell)
    return None if value is None else int(value)


def gpu_busy_percent(
    gpus: Sequence[GpuUse], assigned: Mapping[int, int] | None = None
) -> float | None:
    """The host's GPU load, 0-100: the mean over its GPUs of busy_percent, where a GPU that
    Sandhub has given to a sandbox counts as 100 (taken, even while its sandbox idles).
    None for a host without GPUs."""
    if not gpus:
        return None
    taken = assigned or {}
    loads = [100.0 if taken.get(g.index, 0) > 0 else g.busy_percent for g in gpus]
    return round(sum(loads) / len(loads), 1)


def pick_gpus(gpus: Sequence[GpuUse], assigned: Mapping[int, int], count: int) -> list[int]:
    """Indices (ascending) of the `count` freest GPUs: fewest Sandhub sandboxes on them first
    (`assigned`: GPU index -> sandboxes using it), then least busy, then lowest index."""
    return sorted(g.index for g in _freest(gpus, assigned, count))


def gpu_pick_cost(
    gpus: Sequence[GpuUse], assigned: Mapping[int, int], count: int
) -> tuple[int, float]:
    """How taken the GPUs pick_gpus would give are: (sandboxes already on them, summed
    busy_percent). Lower is freer: placement compares hosts by it."""
    picked = _freest(gpus, assigned, count)
    return sum(assigned.get(g.index, 0) for g in picked), sum(g.busy_percent for g in picked)


def _freest(gpus: Sequence[GpuUse], assigned: Mapping[int, int], count: int) -> list[GpuUse]:
    if count < 0:
        raise ValueError(f"a GPU count cannot be negative (got {count})")
    if count > len(gpus):
        raise NotEnoughGpus(
            f"{count} GPU{'s' if count != 1 else ''} asked, but the host has only {len(gpus)}"
        )
    ranked = sorted(gpus, key=lambda g: (assigned.get(g.index, 0), g.busy_percent, g.index))
    return ranked[:count]


def cuda_visible_devices(indices: Iterable[int]) -> str:
    """CUDA_VISIBLE_DEVICES for these GPUs ("" hides every GPU: a sandbox given none)."""
    values = list(indices)
    if any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in values):
        raise ValueError(f"GPU indices must be whole numbers >= 0, got {values!r}")
    return ",".join(str(i) for i in values)


def gpu_environment(indices: Iterable[int]) -> dict[str, str]:
    """The variables every command of a sandbox gets. CUDA numbers GPUs fastest first by
    default, nvidia-smi by PCI bus: PCI_BUS_ID makes the indices mean the same GPUs."""
    devices = cuda_visible_devices(indices)
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": devices}


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
