"""Helpers of the background-command tests (tests/services/, tests/ssh/test_services.py):
waiting for a condition, the audit rows and queued supervisors of a command, and its row once
it has ended. Not a test module."""

from __future__ import annotations

import time
from collections.abc import Callable

from django_q.models import OrmQ
from django_q.signing import SignedPackage

from sandboxes.models import CommandExecution
from tenants.models import AuditLog


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def audit_actions(sandbox_id: str) -> list[tuple[str, str]]:
    rows = AuditLog.objects.filter(target_id=sandbox_id, action__startswith="command.background")
    return sorted((row.action, row.outcome) for row in rows)


def queued_supervisors() -> list[tuple]:
    """(func, args) of the tasks waiting in the ORM broker's queue."""
    packages = [SignedPackage.loads(row.payload) for row in OrmQ.objects.all()]
    return [(p["func"], tuple(p["args"])) for p in packages]


def final_row(command_id: int, timeout: float) -> CommandExecution:
    return wait_for(
        lambda: CommandExecution.objects.filter(pk=command_id).exclude(status="running").first(),
        timeout,
        f"command {command_id} to be recorded as ended",
    )
