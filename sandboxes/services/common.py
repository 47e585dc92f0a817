"""What every service does the same way: find the principal's sandbox, call its backend, and
turn a backend failure into a service error (a vanished sandbox is marked lost on the way)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.utils import timezone

from hosts.backends import get_backend
from hosts.backends.base import BackendError, SandboxBackend, SandboxGone
from sandboxes.contract.errors import BackendFailure, NotFound
from sandboxes.contract.results import FileStream
from sandboxes.models import ALLOWED_TRANSITIONS, Sandbox, SandboxStatus
from sandboxes.policy import access
from sandboxes.services import tarballs, waking
from tenants.auditing import current
from tenants.principal import Principal


def running_sandbox(principal: Principal, sandbox_id: str, need: str, doing: str) -> Sandbox:
    """The principal's sandbox, authorized for `need`, named as the audit target, running:
    a paused or stopped one is resumed first (waking.py; its resumed_seconds says how long
    that took), any other status is Conflict."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, need, doing)
    if sandbox.status != SandboxStatus.RUNNING:
        waking.wake(principal, sandbox, doing)
    return sandbox


def backend_of(sandbox: Sandbox) -> SandboxBackend:
    if sandbox.host is None:
        raise BackendFailure(f"sandbox {sandbox.public_id} has no host")
    return get_backend(sandbox.host)


@contextmanager
def backend_errors(sandbox: Sandbox, doing: str, *, missing: str = "") -> Iterator[None]:
    """Map what the backend raises inside the block to service errors, the same in every
    service: a missing path is NotFound (when `missing` names it), a vanished sandbox is
    marked lost, anything else the host says is a BackendFailure naming what was being done.
    """
    try:
        yield
    except FileNotFoundError as exc:
        if not missing:
            raise BackendFailure(
                f"could not {doing} in sandbox {sandbox.public_id}: {exc}"
            ) from exc
        raise NotFound(f"{missing} not found in sandbox {sandbox.public_id}") from exc
    except BackendError as exc:
        if isinstance(exc, SandboxGone):
            mark_lost(sandbox, str(exc))
        raise BackendFailure(f"could not {doing} in sandbox {sandbox.public_id}: {exc}") from exc


def mark_lost(sandbox: Sandbox, message: str) -> None:
    """The sandbox's container or directory is gone: lost, unless it is already on its way out
    (being deleted, deleted, in error), which says more than lost would."""
    if SandboxStatus.LOST not in ALLOWED_TRANSITIONS[sandbox.status]:
        return
    sandbox.transition_if(SandboxStatus.LOST, message)


# How stale last_activity_at may get: it only feeds the idle sweep, whose timeouts are
# minutes, and writing it on every command was one of the few row writes a command costs.
ACTIVITY_WRITE_INTERVAL = timedelta(seconds=5)


def touch(sandbox: Sandbox) -> None:
    """Record activity, at most once every ACTIVITY_WRITE_INTERVAL (judged by the row as it
    was read at the start of the call, so a busy sandbox costs one write every few seconds)."""
    now = timezone.now()
    if now - sandbox.last_activity_at < ACTIVITY_WRITE_INTERVAL:
        return
    Sandbox.objects.filter(pk=sandbox.pk).update(last_activity_at=now)
    sandbox.last_activity_at = now


def decode_output(data: bytes) -> str:
    """Text as faithful as a database column allows: invalid UTF-8 and NUL as \\x escapes."""
    return data.decode("utf-8", errors="backslashreplace").replace("\x00", "\\x00")


def started_stream(chunks: Iterator[bytes], source: Iterator[bytes]) -> FileStream:
    """A download whose first chunk is made now, so that a missing path or an engine error
    is raised (and audited) by the service call, as a proper error response, rather than by
    whoever iterates the stream later. `source` (the backend's stream) is closed on error."""
    try:
        first = next(chunks, b"")
    except BaseException:
        tarballs.close(source)
        raise
    return FileStream(_prepended(first, chunks), chunks, source)


def _prepended(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest
