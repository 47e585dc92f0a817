"""Errors the service layer raises. Each message is meant to be shown as is to a person or
an agent, and says what to do differently."""

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


class QuotaExceeded(ServiceError):
    code = "quota"
    http_status = 409


class Conflict(ServiceError):
    code = "conflict"
    http_status = 409


class NoCapacity(ServiceError):
    code = "no_capacity"
    http_status = 503


class BackendFailure(ServiceError):
    code = "backend"
    http_status = 502
