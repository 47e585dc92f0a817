"""Who supervises a background command: a lease in its row, taken and renewed by one worker.

The lease lives in the row's background_state["supervisor"]: token, expiry, and the host,
pid and process start time of the worker that holds it. A supervisor (sandboxes/tasks.py)
renews it every RENEW_SECONDS; a lease that ran out, or whose holder on this machine is gone
(its pid dead or reused), is free for a new supervisor. Taking it is a row-locked
compare-and-set, so two supervisors never watch one command. Pure bookkeeping about workers:
what a look at the command means is decided in services.background_tick.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from sandboxes.models import CommandExecution, CommandStatus

LEASE_SECONDS = 15.0  # a supervisor that has not renewed its lease for this long is gone
RENEW_SECONDS = 5.0  # how often a supervisor renews its lease (one write, not one per poll)
# A supervisor task queued but not started yet (workers busy) holds the command this long.
QUEUED_LEASE_SECONDS = 120.0


def hold(command_id: int, token: str) -> bool:
    """Take or renew our lease; False when another live supervisor has it, or it is over."""
    state = (
        CommandExecution.objects.filter(pk=command_id, status=CommandStatus.RUNNING)
        .values_list("background_state", flat=True)
        .first()
    )
    if state is None:
        return False
    lease: dict[str, Any] | None = (state or {}).get("supervisor")
    fresh = (
        lease is not None
        and ours(lease, token)
        and lease["until"] - time.time() > LEASE_SECONDS - RENEW_SECONDS
    )
    if fresh and lease is not None and lease.get("pid") == os.getpid():
        return True  # we renewed it a moment ago: no write
    return take(command_id, holder(token), lambda old: free_for(old, token))


def take(
    command_id: int, lease: dict[str, Any], allowed: Callable[[dict[str, Any] | None], bool]
) -> bool:
    """Compare-and-set of the lease under a row lock (an IMMEDIATE transaction on SQLite)."""
    with transaction.atomic():
        row = (
            CommandExecution.objects.select_for_update()
            .filter(pk=command_id, status=CommandStatus.RUNNING)
            .only("background_state")
            .first()
        )
        if row is None or not allowed((row.background_state or {}).get("supervisor")):
            return False
        state = {**(row.background_state or {}), "supervisor": lease}
        CommandExecution.objects.filter(pk=command_id).update(background_state=state)
    return True


def holder(token: str) -> dict[str, Any]:
    pid = os.getpid()
    return {
        "token": token,
        "until": time.time() + LEASE_SECONDS,
        "host": socket.gethostname(),
        "pid": pid,
        "pstart": process_start(pid),
    }


def queued(token: str) -> dict[str, Any]:
    return {"token": token, "until": time.time() + QUEUED_LEASE_SECONDS}


def ours(lease: dict[str, Any] | None, token: str) -> bool:
    return lease is not None and lease.get("token") == token


def free_for(lease: dict[str, Any] | None, token: str) -> bool:
    return ours(lease, token) or orphaned(lease, None)


def orphaned(
    lease: dict[str, Any] | None, started_at: datetime | None, *, starter_died: bool = False
) -> bool:
    """Nobody supervises: the lease ran out, or its holder's process is gone. starter_died:
    the platform process that started the command died (its liveness lease expired), so no
    first supervisor is coming from it."""
    if not lease:
        # Its first supervisor is queued by start_background: give that one its chance,
        # unless the process that would have queued it is dead.
        if started_at is None or starter_died:
            return True
        return (timezone.now() - started_at).total_seconds() > QUEUED_LEASE_SECONDS
    if float(lease.get("until") or 0) < time.time():
        return True
    pid = lease.get("pid")
    if not pid or lease.get("host") != socket.gethostname():
        return False  # a holder on another machine: only its lease's expiry tells
    return not process_alive(int(pid), lease.get("pstart"))


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid."""
    fields = _proc_stat(pid)
    return fields[19] if fields else None


def process_alive(pid: int, start: str | None) -> bool:
    fields = _proc_stat(pid)
    if fields is not None:
        return fields[0] not in ("Z", "X") and (start is None or fields[19] == start)
    if os.path.isdir("/proc/self"):
        return False  # Linux, and no such process
    try:
        os.kill(pid, 0)  # elsewhere: ask the kernel (a reused pid reads as alive)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, ..., starttime at 19."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > 19 else None
