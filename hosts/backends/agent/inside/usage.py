"""Usage: what the sandbox's own cgroup and workspace hold now (part of the agent).

The op `usage` answers CPU time, memory, pids and their limits from the cgroup the agent runs
in, and the workspace's disk. The cgroup is found from /proc/self/cgroup, then checked: a
directory counts as the agent's only if its cgroup.procs lists the agent's own pid. That
check matters where a cgroup namespace hides the path (/proc/self/cgroup says "/") while
/sys/fs/cgroup is the host's mount (an isolated SSH sandbox binds the host's /sys): there the
"root" would be the whole host's, so the answer is `visible: false` and the platform reads the
cgroup from the host side (hosts/backends/agentusage.py). Inside a Docker container the
mount shows the container's own cgroup at /sys/fs/cgroup/<controller>/ and the check holds.

Memory leaves out the page cache the kernel can drop (usage - inactive_file), as `docker
stats` does. CPU is the cumulative time in microseconds, and the quota in cores (none: null).

Disk: statvfs when the workspace is a filesystem of its own (a loop disk per sandbox); else a
walk of the tree adding up allocated blocks, bounded by entries and time: past either bound
the sum so far is answered with `disk_partial` (a lower bound), so a huge tree costs at most
USAGE_WALK_SECONDS per sample.
"""

from __future__ import annotations

import os
import time
from typing import Any

from .wire import Request

CGROUP_MOUNT = "/sys/fs/cgroup"
USAGE_WALK_ENTRIES = 50000
USAGE_WALK_SECONDS = 1.0
USAGE_NO_LIMIT = 1 << 62  # v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages)


def usage_read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, ValueError):
        return None


def usage_int(text: str | None) -> int | None:
    """An integer file's value; None for missing, "max", -1 and v1's "no limit"."""
    if text is None:
        return None
    try:
        value = int(text.split()[0])
    except (ValueError, IndexError):
        return None
    return value if 0 <= value < USAGE_NO_LIMIT else None


def usage_stat(text: str | None, key: str) -> int | None:
    """A `key value` line of memory.stat or cpu.stat."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return usage_int(value)
    return None


def usage_own_cgroups(text: str) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; v2's unified line under ""."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            paths[controller] = parts[2]
    return paths


def usage_holds_me(directory: str, pid: int) -> bool:
    procs = usage_read(os.path.join(directory, "cgroup.procs"))
    return procs is not None and str(pid) in procs.split()


def usage_cgroup_dir(mount: str, path: str, pid: int, procs_check: bool = True) -> str | None:
    """The directory of our cgroup under a controller's mount: the path /proc/self/cgroup
    names, else the mount's root (a namespaced mount: a container's); one holding our pid."""
    for candidate in (mount + path.rstrip("/"), mount):
        if os.path.isdir(candidate) and (not procs_check or usage_holds_me(candidate, pid)):
            return candidate
    return None


def usage_cgroup(root: str = CGROUP_MOUNT, pid: int | None = None) -> dict[str, Any]:
    """CPU, memory and pids of our cgroup, v2 or v1; {"visible": False} if not ours to see."""
    pid = os.getpid() if pid is None else pid
    own = usage_own_cgroups(usage_read("/proc/self/cgroup") or "")
    if os.path.isfile(os.path.join(root, "cgroup.controllers")):  # v2: one tree
        found = usage_cgroup_dir(root, own.get("", "/"), pid)
        return usage_v2(found) if found else {"visible": False, "cgroup": "v2"}
    dirs = {}
    for controller in ("memory", "cpu", "cpuacct", "pids"):
        mount = os.path.join(root, controller)
        dirs[controller] = usage_cgroup_dir(mount, own.get(controller, "/"), pid)
    if dirs["memory"] is None:  # the one that says whether we see our own cgroup at all
        return {"visible": False, "cgroup": "v1" if own else ""}
    return usage_v1(dirs)


def usage_v2(directory: str) -> dict[str, Any]:
    def read(name: str) -> str | None:
        return usage_read(os.path.join(directory, name))

    memory = usage_int(read("memory.current"))
    inactive = usage_stat(read("memory.stat"), "inactive_file") or 0
    usec = usage_stat(read("cpu.stat"), "usage_usec")
    quota, period = ((read("cpu.max") or "max 100000").split() + ["100000"])[:2]
    return {
        "visible": True,
        "cgroup": "v2",
        "cpu_usec": usec,
        "cpu_limit": usage_cores(usage_int(quota), usage_int(period)),
        "memory": max(memory - inactive, 0) if memory is not None else None,
        "memory_limit": usage_int(read("memory.max")),
        "pids": usage_int(read("pids.current")),
        "pids_limit": usage_int(read("pids.max")),
    }


def usage_v1(dirs: dict[str, str | None]) -> dict[str, Any]:
    def read(controller: str, name: str) -> str | None:
        directory = dirs.get(controller)
        return usage_read(os.path.join(directory, name)) if directory else None

    memory = usage_int(read("memory", "memory.usage_in_bytes"))
    inactive = usage_stat(read("memory", "memory.stat"), "total_inactive_file") or 0
    nanoseconds = usage_int(read("cpuacct", "cpuacct.usage"))
    quota = usage_int(read("cpu", "cpu.cfs_quota_us"))
    return {
        "visible": True,
        "cgroup": "v1",
        "cpu_usec": nanoseconds // 1000 if nanoseconds is not None else None,
        "cpu_limit": usage_cores(quota, usage_int(read("cpu", "cpu.cfs_period_us"))),
        "memory": max(memory - inactive, 0) if memory is not None else None,
        "memory_limit": usage_int(read("memory", "memory.limit_in_bytes")),
        "pids": usage_int(read("pids", "pids.current")),
        "pids_limit": usage_int(read("pids", "pids.max")),
    }


def usage_cores(quota: int | None, period: int | None) -> float | None:
    if not quota or not period:
        return None
    return round(quota / period, 3)


def usage_disk(workspace: str) -> dict[str, Any]:
    """Used and total bytes of the workspace: statvfs of its own filesystem, else a walk."""
    try:
        own_fs = os.stat(workspace).st_dev != os.stat(os.path.dirname(workspace) or "/").st_dev
    except OSError:
        return {"disk_used": None, "disk_limit": None}
    if own_fs:
        fs = os.statvfs(workspace)
        return {
            "disk_used": (fs.f_blocks - fs.f_bfree) * fs.f_frsize,
            "disk_limit": fs.f_blocks * fs.f_frsize,
        }
    used, partial = usage_walk(workspace)
    return {"disk_used": used, "disk_limit": None, "disk_partial": partial}


def usage_walk(top: str) -> tuple[int, bool]:
    """Allocated bytes under top (links not followed, one filesystem); (sum, cut short)."""
    give_up = time.monotonic() + USAGE_WALK_SECONDS
    device = os.lstat(top).st_dev
    total, seen, pending = 0, 0, [top]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > USAGE_WALK_ENTRIES or time.monotonic() > give_up:
                return total, True
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False) and info.st_dev == device:
                pending.append(entry.path)
    return total, False


def usage_sample(workspace: str) -> dict[str, Any]:
    answer = usage_cgroup()
    answer.update(usage_disk(workspace))
    answer["at"] = time.time()
    return answer


def op_usage(request: Request) -> dict[str, Any]:
    return usage_sample(str(request.args.get("workspace") or "/workspace"))
