"""Usage samples of the in-memory backend (tests/fakes.py): a sandbox's box says what it uses
(`usage`: UsageSample fields to set; by default a little CPU a call, 10 MiB of memory,
its files' sizes as disk), and `usage_gate`/`usage_broken` let a test hold or break one
sandbox's sampling (the round must not wait for it past its bound, nor stop)."""

from __future__ import annotations

import threading
import time
from typing import Any

from hosts.backends.base import BackendError
from hosts.backends.types import UsageSample

MIB = 1 << 20


class FakeUsage:
    """Mixed into FakeBackend."""

    usage_broken: set[str] = set()  # container ids whose sampling fails
    usage_gate: dict[str, threading.Event] = {}  # container id -> released when set

    def _box(self, state: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def sample_usage(self, state: dict[str, Any]) -> UsageSample:
        box = self._box(state)
        key = state.get("container_id", "")
        gate = self.usage_gate.get(key)
        if gate is not None:
            gate.wait(30)
        if key in self.usage_broken:
            raise BackendError("fake: usage cannot be read")
        spec = box["spec"]
        box["cpu_seconds"] = box.get("cpu_seconds", 0.0) + 0.5
        values: dict[str, Any] = {
            "at": time.time(),
            "cpu_seconds": box["cpu_seconds"],
            "cpu_limit": spec.cpus,
            "memory_bytes": 10 * MIB,
            "memory_limit_bytes": spec.memory_mb * MIB,
            "disk_used_bytes": sum(len(f) for f in box["files"].values() if isinstance(f, bytes)),
            "disk_limit_bytes": (spec.disk_mb or 0) * MIB or None,
            "pids": 3,
            "pids_limit": spec.pids_limit,
        }
        values.update(box.get("usage") or {})
        return UsageSample(**values)
