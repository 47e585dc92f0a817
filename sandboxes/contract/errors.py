"""Errors the service layer raises. Each message is meant to be shown as is to a person or
an agent, and says what to do differently.

The common family lives in tenants.errors (the bottom layer), so the audit decorator records
every service's refusals by their code; these add the kinds only sandboxes have.
"""

from __future__ import annotations

from tenants.errors import Conflict, InvalidInput, NotFound, PermissionDenied, ServiceError

__all__ = [
    "BackendFailure",
    "Conflict",
    "InvalidInput",
    "NoCapacity",
    "NotFound",
    "PermissionDenied",
    "QuotaExceeded",
    "ServiceError",
]


class QuotaExceeded(ServiceError):
    code = "quota"
    http_status = 409


class NoCapacity(ServiceError):
    code = "no_capacity"
    http_status = 503


class BackendFailure(ServiceError):
    code = "backend"
    http_status = 502
