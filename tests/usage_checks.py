"""What sample_usage must show of a real sandbox, on any kind (tests/docker/test_usage.py,
tests/ssh/test_usage.py): memory held by a process, CPU time of a busy loop, its pids and the
sandbox's limits. Not a test module."""

from __future__ import annotations

import uuid
from typing import Any

from hosts.backends.base import SandboxBackend

MIB = 1 << 20
HOLD_MB = 100
# Touches every page (a bare bytearray is zero pages the kernel has not given yet), then
# says so and holds them.
HOLDER = (
    "import time\n"
    f"b = bytearray({HOLD_MB} << 20)\n"
    "for i in range(0, len(b), 4096): b[i] = 1\n"
    "open('ready', 'w').close()\n"
    "time.sleep(600)\n"
)
BUSY = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass\n"


def sh(backend: SandboxBackend, state: dict[str, Any], script: str, timeout: float = 60) -> str:
    result = backend.exec(
        state, ["sh", "-c", script], cwd="/workspace", env={}, timeout=timeout, output_cap=MIB
    )
    assert result.exit_code == 0, result.stderr.decode()
    return result.stdout.decode()


def check_usage(
    backend: SandboxBackend, state: dict[str, Any], *, memory_mb: int, pids: int, cpus: float
) -> None:
    folder = f"hold-{uuid.uuid4().hex[:6]}"
    sh(backend, state, f"mkdir {folder}")
    backend.start_background(
        state,
        ["python3", "-c", HOLDER],
        cwd=f"/workspace/{folder}",
        env={},
        job_id=folder,
    )
    # The holder says when its pages are touched: waited for in the sandbox, bounded.
    sh(backend, state, f"until [ -e {folder}/ready ]; do sleep 0.05; done", timeout=60)
    before = backend.sample_usage(state)
    assert before.memory_bytes is not None and before.memory_bytes >= HOLD_MB * MIB, before
    assert before.memory_limit_bytes == memory_mb * MIB, before
    assert before.pids is not None and before.pids >= 2, before  # the holder and its job runner
    assert before.pids_limit == pids, before
    assert before.cpu_limit == cpus, before
    assert before.cpu_seconds is not None
    sh(backend, state, f"python3 -c '{BUSY}'")
    after = backend.sample_usage(state)
    assert after.cpu_seconds is not None and after.cpu_seconds - before.cpu_seconds >= 0.9, (
        before,
        after,
    )
    assert after.at >= before.at
    assert after.disk_used_bytes is not None
