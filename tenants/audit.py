"""The one helper that writes the audit log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tenants.models import AuditKind, AuditLog

if TYPE_CHECKING:
    from tenants.principal import Principal


def record(
    principal: Principal,
    action: str,
    *,
    target_type: str = "",
    target_id: str = "",
    outcome: str = "ok",
    details: dict[str, Any] | None = None,
    kind: str = AuditKind.CHANGE,
) -> AuditLog:
    entry = row(principal, action, target_type=target_type, target_id=target_id)
    entry.outcome, entry.details, entry.kind = outcome, details or {}, kind
    entry.save()
    return entry


def row(
    principal: Principal,
    action: str,
    *,
    target_type: str = "",
    target_id: str = "",
    outcome: str = "ok",
    details: dict[str, Any] | None = None,
    kind: str = AuditKind.CHANGE,
) -> AuditLog:
    """The row `record` writes, not saved yet (a change writes it with its own statements)."""
    return AuditLog(
        actor=principal.user if principal.user and principal.user.pk else None,
        team=principal.team,
        channel=principal.channel,
        action=action,
        kind=kind,
        target_type=target_type,
        target_id=target_id,
        source_address=principal.source_address,
        outcome=outcome,
        details=details or {},
    )
