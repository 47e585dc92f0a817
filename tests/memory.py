"""This test process's own memory: the peak resident set size, to show that streaming a large
output or file costs the platform a bounded amount (tests/docker/, tests/previews/). Linux
only (/proc/self). Not a test module."""

from __future__ import annotations

MIB = 1024 * 1024


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> int:
    """Reset the peak (VmHWM) if the kernel lets us; return the baseline to compare with."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return _status_kb("VmRSS")
    except OSError:
        return _status_kb("VmHWM")


def peak_rss() -> int:
    return _status_kb("VmHWM")
