"""Where a machine's CPU went during a window: the whole machine, named processes, containers.

bench_load uses it to say what one command costs each party (web workers, clients, the
sandboxes themselves, the engine), so a throughput target can be checked against what the
cores can give at all. Linux only: /proc and the containers' cgroups (v1 or v2).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
# The engine's own processes: the daemon, containerd, and one shim per container (its
# comm is truncated to 15 characters by the kernel).
ENGINE_NAMES = frozenset({"dockerd", "containerd", "containerd-shim"})
CGROUP_ROOT = Path("/sys/fs/cgroup")


def machine_busy() -> float:
    """CPU seconds all cores spent not idle (nor waiting for I/O) since boot."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / TICKS


def _comm_and_times(pid: str) -> tuple[str, float]:
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return comm, (int(fields[11]) + int(fields[12])) / TICKS


def pids_cpu(pids: list[int]) -> float:
    """utime + stime of these processes so far, in seconds (0 for one that is gone)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            total += _comm_and_times(str(pid))[1]
    return total


def processes_cpu(names: frozenset[str]) -> float:
    """utime + stime of the live processes with one of these names (comm), in seconds."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                comm, seconds = _comm_and_times(pid)
            except (OSError, ValueError):
                continue  # gone meanwhile
            if comm in names:
                total += seconds
    return total


def cgroup_usage_file(pid: int) -> Path | None:
    """The file that counts the CPU time of the cgroup `pid` is in (a container's init
    process: the whole container, whatever ran and ended in it)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):  # v1
            for mount in ("cpuacct", "cpu,cpuacct"):
                candidate = CGROUP_ROOT / mount / path.lstrip("/") / "cpuacct.usage"
                if candidate.exists():
                    return candidate
        if controllers == "":  # v2's single hierarchy
            candidate = CGROUP_ROOT / path.lstrip("/") / "cpu.stat"
            if candidate.exists():
                return candidate
    return None


def cgroup_seconds(usage: Path) -> float:
    text = usage.read_text()
    if usage.name == "cpuacct.usage":
        return int(text) / 1e9
    for line in text.splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    return 0.0


@dataclass
class Reading:
    machine: float
    engine: float
    containers: float


def read(usage_files: list[Path]) -> Reading:
    containers = 0.0
    for usage in usage_files:
        with contextlib.suppress(OSError):  # a sandbox gone meanwhile counts no more
            containers += cgroup_seconds(usage)
    return Reading(machine_busy(), processes_cpu(ENGINE_NAMES), containers)


def spent(before: Reading, after: Reading) -> Reading:
    return Reading(
        after.machine - before.machine,
        after.engine - before.engine,
        after.containers - before.containers,
    )
