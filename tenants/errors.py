"""Errors a service refuses with. Each message is meant to be shown as is to a person or an
agent, and says what to do differently.

They live in tenants, the bottom layer, so every service (tenants' own, and sandboxes' which
add their own kinds) raises one family and the audit decorator (tenants.auditing) records its
`code` as the outcome.
"""

from __future__ import annotations


class ServiceError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(ServiceError):
    code = "invalid"
    http_status = 400


class NotFound(ServiceError):
    code = "not_found"
    http_status = 404


class PermissionDenied(ServiceError):
    code = "forbidden"
    http_status = 403


class Conflict(ServiceError):
    code = "conflict"
    http_status = 409
