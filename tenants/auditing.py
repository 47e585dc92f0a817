"""One AuditLog row per service call, success or failure, written by a decorator.

The service body fills in the target, the team and the details as it learns them (through
`current()`); the row is written after the call, outside any transaction the body rolled
back, so a refused or failed call is still on record. A caller's own enclosing transaction
is the caller's business: if it rolls back, the row goes with it.

Generic on purpose: it knows only the Principal, tenants.errors and tenants.audit, so every
layer's services can use it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from tenants import audit
from tenants.errors import ServiceError
from tenants.models import Team
from tenants.principal import Principal

P = ParamSpec("P")
R = TypeVar("R")

# Principal.extra entries copied into every row: which key acted (by its public prefix), and
# which program acted for the system (e.g. a management command).
_EXTRA_DETAILS = ("api_key", "via")


@dataclass
class AuditDraft:
    action: str
    target_type: str = ""
    target_id: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # The team the row is filed under when it is not the principal's own (a platform admin
    # acting on some team, a user revoking his key in another team).
    team: Team | None = None

    def target(self, target_type: str, target_id: Any) -> None:
        self.target_type, self.target_id = target_type, str(target_id)


_current: ContextVar[AuditDraft | None] = ContextVar("sandhub_audit_draft", default=None)


def current() -> AuditDraft:
    draft = _current.get()
    if draft is None:  # called outside an audited service: keep the details nowhere
        return AuditDraft(action="")
    return draft


def _clean(value: Any) -> Any:
    """PostgreSQL's jsonb refuses NUL characters; keep everything else as is."""
    if isinstance(value, str):
        return value.replace("\x00", "\\x00")
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def audited(action: str, target_type: str = "") -> Callable[[Callable[P, R]], Callable[P, R]]:
    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            principal = args[0]
            assert isinstance(principal, Principal), "services take the principal first"
            draft = AuditDraft(action=action, target_type=target_type)
            token = _current.set(draft)
            try:
                result = function(*args, **kwargs)
            except ServiceError as exc:
                _write(principal, draft, exc.code, exc.message)
                raise
            except Exception as exc:
                _write(principal, draft, "error", f"{type(exc).__name__}: {exc}")
                raise
            finally:
                _current.reset(token)
            _write(principal, draft, "ok", "")
            return result

        return wrapper

    return decorate


def _write(principal: Principal, draft: AuditDraft, outcome: str, error: str) -> None:
    details = dict(draft.details)
    for name in _EXTRA_DETAILS:
        if principal.extra.get(name):
            details[name] = principal.extra[name]
    if error:
        details["error"] = error[:1000]
    if draft.team is not None:
        principal = dataclasses.replace(principal, team=draft.team)
    audit.record(
        principal,
        draft.action,
        target_type=draft.target_type,
        target_id=draft.target_id[:64],
        outcome=outcome,
        details=_clean(details),
    )
