"""GPUs of a host as nvidia-smi reports them, and which of them a new sandbox gets: pure
functions, no network, no database. Any kind of host with GPUs uses them (the SSH probes
parse nvidia-smi's CSV into GpuUse; placement picks the freest GPUs; a sandbox gets
CUDA_VISIBLE_DEVICES for its own)."""

from __future__ import annotations

import dataclasses
import re
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


class NotEnoughGpus(ValueError):
    """More GPUs were asked of a host than it has."""


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


def _clamp(percent: float) -> float:
    return min(max(percent, 0.0), 100.0)
