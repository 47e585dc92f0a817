"""Who may do what: one place that finds a principal's sandbox or says "not found".

Another team's sandbox answers exactly like a missing one, so ids cannot be probed.
"""

from __future__ import annotations

from django.db.models import QuerySet

from dbkit.prepared import PreparedRead
from sandboxes.contract.errors import NotFound, PermissionDenied
from sandboxes.models import Sandbox
from sandboxes.policy import validation
from tenants.models import Role
from tenants.principal import Principal

READ, WRITE = "read", "write"


def is_platform_admin(principal: Principal) -> bool:
    """The system itself, or a staff user acting through Django admin."""
    return principal.is_platform_admin


def role_of(principal: Principal) -> str | None:
    if is_platform_admin(principal):
        return Role.OWNER
    if principal.user is None or not principal.user.is_active:
        return None
    if principal.role is not None:
        return principal.role
    membership = principal.membership()
    return membership.role if membership else None


def require(principal: Principal, need: str, doing: str) -> str:
    """The principal's role if it allows `need` (read/write), else PermissionDenied."""
    return _allowed(principal, role_of(principal), need, doing)


def _allowed(principal: Principal, role: str | None, need: str, doing: str) -> str:
    if role is None:
        raise PermissionDenied(f"you are not a member of team {principal.team or '(none)'}")
    if (
        principal.scopes is not None
        and need not in principal.scopes
        and "admin" not in principal.scopes
    ):
        raise PermissionDenied(f"this API key has no {need} scope, needed to {doing}")
    if need == WRITE and role == Role.VIEWER:
        raise PermissionDenied(f"a viewer may not {doing}")
    return role


def _visible_sandboxes() -> QuerySet[Sandbox]:
    return Sandbox.objects.visible().select_related("team", "owner", "host", "image")


def sandboxes_of(principal: Principal):
    queryset = _visible_sandboxes()
    if is_platform_admin(principal) and principal.team is None:
        return queryset
    return queryset.filter(team=principal.team)


# Every call on a sandbox reads it like this: compiled once (dbkit/prepared.py).
_team_sandbox: PreparedRead[Sandbox] = PreparedRead(
    lambda team_id, public_id: (
        _visible_sandboxes().filter(team_id=team_id, public_id=public_id).order_by()[:1]
    ),
    -1_734_028_195,  # within a 32-bit key: Django drops out-of-range lookups
    "\x00sandbox placeholder",
)


def _first(queryset: QuerySet[Sandbox]) -> Sandbox | None:
    """The one row a unique lookup finds: .first() would order by the key, and compiling
    the ordering is a fair share of the CPU this read costs on every call."""
    return next(iter(queryset.order_by()[:1]), None)


def _find(principal: Principal, sandbox_id: str) -> Sandbox | None:
    if principal.team is not None:
        return _team_sandbox.first(principal.team.pk, sandbox_id)
    return _first(sandboxes_of(principal).filter(public_id=sandbox_id))


def get_sandbox(principal: Principal, sandbox_id: str, need: str, doing: str) -> Sandbox:
    validation.sandbox_id(sandbox_id)
    role = role_of(principal)  # one membership read per call: it decides both checks
    sandbox = _find(principal, sandbox_id) if role else None
    if sandbox is None:
        raise NotFound(f"sandbox {sandbox_id} not found")
    _allowed(principal, role, need, doing)
    return sandbox
