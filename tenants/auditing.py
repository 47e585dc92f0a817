"""The audit rows of service calls, written by a decorator: what changed, what was read, and
every refusal.

Each service says what kind of action it is (AuditKind):
- a change is audited in the same transaction as the change: with `atomic=True` the whole
  service body and its row are one transaction (for services that only write rows); a
  service that waits on a sandbox or a host meanwhile (a command, a provision) makes its
  state changes inside `with change():`, and the first writes the row in its transaction.
  The log is append-only: an action whose end says more than that row (a workflow's steps,
  a deploy that fails after starting its app) closes it with a second row. Either way
  there is no change without its row and no row for a change that was rolled back;
- a read of data out of a sandbox (a download, a file link opened, a preview opened) is
  audited after the call;
- a view of metadata (a listing, a sandbox's or command's details) is audited only when the
  principal's team asks for it (Team.audit_views): on every page view, such rows would bury
  the changes an auditor looks for.
A refused or failed call of any kind is always on record: its row is written after the call,
outside any transaction the body rolled back. The service body fills in the target, the team
and the details as it learns them (through `current()`). A caller's own enclosing
transaction is the caller's business: if it rolls back, the row goes with it.

Generic on purpose: it knows only the Principal, tenants.errors and tenants.audit, so every
layer's services can use it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from django.db import transaction

from dbkit import writes
from tenants import audit
from tenants.errors import ServiceError
from tenants.models import AuditKind, AuditLog, Team
from tenants.principal import Principal

# What services pass as `kind`: a view of metadata, a read of data (a change is the default).
AUDIT_VIEW, AUDIT_READ = AuditKind.VIEW, AuditKind.READ

P = ParamSpec("P")
R = TypeVar("R")

# Principal.extra entries copied into every row: which key acted (by its public prefix), and
# which program acted for the system (e.g. a management command).
_EXTRA_DETAILS = ("api_key", "via")


@dataclass
class AuditDraft:
    action: str
    kind: str = AuditKind.CHANGE
    target_type: str = ""
    target_id: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # The team the row is filed under when it is not the principal's own (a platform admin
    # acting on some team, a user revoking his key in another team).
    team: Team | None = None
    principal: Principal | None = None
    written: bool = False  # the ok row is in (inside the change's transaction)
    # The row a change wrote (change(): kept), compared with the action's end: one that
    # says more (a failure, details learned after the change) closes it with a row of its own.
    row: AuditLog | None = None
    steps: int = 0  # unaudited steps running (their change_with goes through change())

    def target(self, target_type: str, target_id: Any) -> None:
        self.target_type, self.target_id = target_type, str(target_id)


_current: ContextVar[AuditDraft | None] = ContextVar("sandhub_audit_draft", default=None)


class _InFlight:
    """How many audited service calls this process is serving at this moment (a nested one
    counts apart)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def add(self, change: int) -> None:
        with self._lock:
            self.count += change


_in_flight = _InFlight()


def calls_in_flight() -> int:
    """Audited service calls being served in this process now: housekeeping waits for none
    before starting work that competes with them for the CPU (the warm pool's refill,
    sandboxes/housekeeping/poolfill.py)."""
    return _in_flight.count


def current() -> AuditDraft:
    draft = _current.get()
    if draft is None:  # called outside an audited service: keep the details nowhere
        return AuditDraft(action="")
    return draft


@contextlib.contextmanager
def change() -> Iterator[AuditDraft]:
    """The service's state change and its audit row, in one transaction: the block makes the
    change, the row is written before the transaction commits. Outside an audited service (a
    service called unaudited from another) it is just a transaction."""
    draft = _current.get()
    with transaction.atomic():
        yield current()
        if _owed(draft):
            assert draft is not None and draft.principal is not None
            draft.row = _write(draft.principal, draft, "ok", "")
            draft.written = True


def _owed(draft: AuditDraft | None) -> bool:
    """Whether a change made now writes the action's row: the action is a change (a view
    that records a state on the way, as a poll that sees a job's end, keeps its own rule)
    and its row is not in yet. The first change writes it, so no change is ever without
    its row; an action of several changes (a workflow's steps) amends it at its end."""
    return (
        draft is not None
        and draft.principal is not None
        and draft.kind == AuditKind.CHANGE
        and not draft.written
    )


def _clean(value: Any) -> Any:
    """PostgreSQL's jsonb refuses NUL characters; keep everything else as is."""
    if isinstance(value, str):
        return value.replace("\x00", "\\x00")
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def audited(
    action: str, target_type: str = "", *, kind: str = AuditKind.CHANGE, atomic: bool = False
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Audit the service: `kind` as above; `atomic`: the body and its row in one transaction
    (a change that only writes rows). The undecorated function stays reachable as
    `.unaudited`, for a service that calls another as part of its own audited action."""
    assert not atomic or kind == AuditKind.CHANGE, "only a change has a transaction to share"

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            principal = args[0]
            assert isinstance(principal, Principal), "services take the principal first"
            draft = AuditDraft(action, kind, target_type, principal=principal)
            token = _current.set(draft)
            _in_flight.add(1)
            try:
                if atomic:
                    with change():
                        result = function(*args, **kwargs)
                else:
                    result = function(*args, **kwargs)
            except ServiceError as exc:
                _settle(principal, draft, exc.code, exc.message)
                raise
            except Exception as exc:
                _settle(principal, draft, "error", f"{type(exc).__name__}: {exc}")
                raise
            finally:
                _current.reset(token)
                _in_flight.add(-1)
            if draft.written or _wanted(principal, draft):
                _settle(principal, draft, "ok", "")
            return result

        wrapper.unaudited = function  # type: ignore[attr-defined]
        return wrapper

    return decorate


def change_with(*statements: writes.Statement) -> None:
    """The service's last state change as compiled statements (dbkit.writes) and its audit
    row, run back to back in one short transaction: for a hot path, where the ORM's Python
    between two writes would hold SQLite's write lock (change() is the general form)."""
    draft = _current.get()
    if draft is not None and draft.steps and _owed(draft):
        with change():  # a step's change: its row is kept, to be amended (see AuditDraft.row)
            writes.run_together(list(statements))
        return
    batch = list(statements)
    owed = _owed(draft)
    if owed:
        assert draft is not None and draft.principal is not None
        who, fields = _fields(draft.principal, draft, "ok", "")
        batch.append(writes.insert(audit.row(who, draft.action, **fields)))
    writes.run_together(batch)
    if owed:
        assert draft is not None
        draft.written = True


def unaudited(service: Callable[P, R]) -> Callable[P, R]:
    """An audited service's own body, without its row: for a service that runs another as a
    step of its own audited action (a workflow, a deploy), whose row covers the step and
    whose draft the step fills in. The step's first change writes the action's row (which
    the action's end may close with a second)."""
    body: Callable[P, R] = service.unaudited  # type: ignore[attr-defined]

    @functools.wraps(body)
    def step(*args: P.args, **kwargs: P.kwargs) -> R:
        draft = _current.get()
        if draft is not None:
            draft.steps += 1
        try:
            return body(*args, **kwargs)
        finally:
            if draft is not None:
                draft.steps -= 1

    return step


def _wanted(principal: Principal, draft: AuditDraft) -> bool:
    """Whether a successful call leaves a row: always, but for views of metadata, which are
    kept only for a team that asks (the team the row would be filed under)."""
    if draft.kind != AuditKind.VIEW:
        return True
    team = draft.team or principal.team
    return bool(team is not None and team.audit_views)


def _write(principal: Principal, draft: AuditDraft, outcome: str, error: str) -> AuditLog:
    who, fields = _fields(principal, draft, outcome, error)
    return audit.record(who, draft.action, **fields)


def _settle(principal: Principal, draft: AuditDraft, outcome: str, error: str) -> None:
    """The action's row as it ended: written now, unless a change on the way wrote it and
    the end adds nothing (a later failure, details learned after: a closing row)."""
    if draft.row is None:
        if not (draft.written and outcome == "ok"):
            _write(principal, draft, outcome, error)
        return
    _, fields = _fields(principal, draft, outcome, error)
    kept = draft.row
    if all(getattr(kept, name) == value for name, value in fields.items()):
        return
    # The log is append-only: the end is a row of its own, pointing at the one it closes.
    draft.details["continues"] = kept.pk
    _write(principal, draft, outcome, error)


def _fields(
    principal: Principal, draft: AuditDraft, outcome: str, error: str
) -> tuple[Principal, dict[str, Any]]:
    """Who the row is filed for, and its fields, as audit.record and audit.row take them."""
    details = dict(draft.details)
    for name in _EXTRA_DETAILS:
        if principal.extra.get(name):
            details[name] = principal.extra[name]
    if error:
        details["error"] = error[:1000]
    if draft.team is not None:
        principal = dataclasses.replace(principal, team=draft.team)
    return principal, {
        "target_type": draft.target_type,
        "target_id": draft.target_id[:64],
        "outcome": outcome,
        "details": _clean(details),
        "kind": draft.kind,
    }
