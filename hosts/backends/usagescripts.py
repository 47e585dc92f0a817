"""Usage without the agent: the same readings as agent/inside/usage.py, in POSIX sh (cat of
the cgroup files, df or a bounded du), for a sandbox without python3, and for reading a
sandbox's cgroup from the host side (SSH: `cgroup` given, no pid check). The answer is
`key value` lines, parsed into the agent op's answer (a dict of the same keys)."""

from __future__ import annotations

from typing import Any

__all__ = ["USAGE_SCRIPT", "DU_SECONDS", "parse_usage"]

DU_SECONDS = 2  # a workspace that is no filesystem of its own: du, cut off after this

# $1: the workspace ("": no disk); $2: the cgroup's path under each controller's mount, given
# by the platform (the host side: no pid check, that path or nothing), or "" to find our own
# from /proc/self/cgroup.
USAGE_SCRIPT = r"""
ws=$1 given=$2 R=/sys/fs/cgroup
own() {
  if [ -n "$given" ]; then echo "$given"; return; fi
  awk -F: -v c="$1" '{ n = split($2, a, ",")
    if (c == "" && $2 == "") { print $3; exit }
    for (i = 1; i <= n; i++) if (a[i] == c) { print $3; exit } }' /proc/self/cgroup
}
find_dir() {  # $1 mount, $2 path: the directory of our cgroup, one that holds this shell
  if [ -n "$given" ]; then [ -d "$1$2" ] && echo "$1$2"; return 0; fi
  for d in "$1${2%/}" "$1"; do
    if [ -d "$d" ] && grep -qx "$$" "$d/cgroup.procs" 2>/dev/null; then echo "$d"; return; fi
  done
}
val() { v=$(cat -- "$2" 2>/dev/null) && echo "$1 $v"; }
stat_of() { awk -v k="$3" '$1 == k { print "'"$1"' " $2 }' "$2" 2>/dev/null; }
if [ -f "$R/cgroup.controllers" ]; then
  d=$(find_dir "$R" "$(own '')")
  if [ -n "$d" ]; then
    echo "cgroup v2"; echo "visible 1"
    val memory_raw "$d/memory.current"; stat_of inactive "$d/memory.stat" inactive_file
    stat_of cpu_usec "$d/cpu.stat" usage_usec; val cpu_max "$d/cpu.max"
    val memory_limit "$d/memory.max"; val pids "$d/pids.current"; val pids_limit "$d/pids.max"
  fi
else
  m=$(find_dir "$R/memory" "$(own memory)")
  if [ -n "$m" ]; then
    echo "cgroup v1"; echo "visible 1"
    val memory_raw "$m/memory.usage_in_bytes"; val memory_limit "$m/memory.limit_in_bytes"
    stat_of inactive "$m/memory.stat" total_inactive_file
    c=$(find_dir "$R/cpuacct" "$(own cpuacct)"); [ -n "$c" ] && val cpu_nsec "$c/cpuacct.usage"
    c=$(find_dir "$R/cpu" "$(own cpu)")
    [ -n "$c" ] && val cpu_quota "$c/cpu.cfs_quota_us" && val cpu_period "$c/cpu.cfs_period_us"
    p=$(find_dir "$R/pids" "$(own pids)")
    [ -n "$p" ] && val pids "$p/pids.current" && val pids_limit "$p/pids.max"
  fi
fi
[ -n "$ws" ] || exit 0
if [ "$(stat -c %d -- "$ws" 2>/dev/null)" != "$(stat -c %d -- "$ws/.." 2>/dev/null)" ]; then
  df -Pk -- "$ws" 2>/dev/null | awk 'NR == 2 { print "disk_used", $3 * 1024
    print "disk_limit", $2 * 1024 }'
else
  used=$(timeout __DU__ du -skx -- "$ws" 2>/dev/null | awk '{ print $1 * 1024 }')
  if [ -n "$used" ]; then echo "disk_used $used"; else echo "disk_partial 1"; fi
fi
""".replace("__DU__", str(DU_SECONDS))

_NO_LIMIT = 1 << 62


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.split()[0])
    except (ValueError, IndexError):
        return None
    return value if 0 <= value < _NO_LIMIT else None


def _cores(quota: int | None, period: int | None) -> float | None:
    return round(quota / period, 3) if quota and period else None


def parse_usage(text: str) -> dict[str, Any]:
    """The script's lines as the agent op's answer (agent/inside/usage.py)."""
    lines: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            lines[key] = value.strip()
    answer: dict[str, Any] = {"visible": lines.get("visible") == "1"}
    answer["cgroup"] = lines.get("cgroup", "")
    raw = _number(lines.get("memory_raw"))
    inactive = _number(lines.get("inactive")) or 0
    answer["memory"] = max(raw - inactive, 0) if raw is not None else None
    answer["memory_limit"] = _number(lines.get("memory_limit"))
    if "cpu_max" in lines:  # v2: "max 100000" or "50000 100000"
        quota, _, period = lines["cpu_max"].partition(" ")
        answer["cpu_limit"] = _cores(_number(quota), _number(period))
    else:
        answer["cpu_limit"] = _cores(
            _number(lines.get("cpu_quota")), _number(lines.get("cpu_period"))
        )
    usec = _number(lines.get("cpu_usec"))
    nsec = _number(lines.get("cpu_nsec"))
    answer["cpu_usec"] = usec if usec is not None else (nsec // 1000 if nsec is not None else None)
    answer["pids"] = _number(lines.get("pids"))
    answer["pids_limit"] = _number(lines.get("pids_limit"))
    answer["disk_used"] = _number(lines.get("disk_used"))
    answer["disk_limit"] = _number(lines.get("disk_limit"))
    answer["disk_partial"] = lines.get("disk_partial") == "1"
    return answer
