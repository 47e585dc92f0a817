"""Tasks of bench/bench_broker.py, importable by the qcluster it starts (bench._broker_tasks)."""

from __future__ import annotations

import time


def started_at(_enqueued: float) -> float:
    """A no-op: when a worker started it (time.time(); the bench runs on one machine)."""
    return time.time()
