"""One AuditLog row per service call: the decorator lives in tenants.auditing (the bottom
layer), shared by every layer's services."""

from tenants.auditing import AuditDraft, audited, current

__all__ = ["AuditDraft", "audited", "current"]
