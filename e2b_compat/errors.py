"""Errors of the E2B endpoints in E2B's shapes: the control API answers `{"code": <HTTP
status>, "message": ...}` (its OpenAPI Error), envd answers Connect errors. A service's
refusal keeps its message (it says what to do); another team's sandbox is "not found",
worded as for an id that never existed."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse, JsonResponse

from e2b_compat.auth import Unauthenticated
from e2b_compat.connect import ConnectError
from sandboxes.contract.errors import InvalidInput, ServiceError

__all__ = ["api_error", "as_connect_error", "rest_error"]

# A service error's HTTP status, as a Connect code (envd's errors).
_CONNECT_CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    409: "failed_precondition",
    413: "resource_exhausted",
    429: "resource_exhausted",
    502: "unavailable",
    503: "unavailable",
}


def api_error(status: int, message: str, headers: dict[str, str] | None = None) -> HttpResponse:
    response = JsonResponse({"code": status, "message": message}, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def rest_error(exc: Exception) -> HttpResponse | None:
    """The control API's answer to a refusal, or None for an error that is not one."""
    if isinstance(exc, Unauthenticated):
        if exc.retry_after is not None:
            return api_error(429, exc.message, {"Retry-After": str(exc.retry_after)})
        return api_error(401, exc.message)
    if isinstance(exc, ServiceError):
        return api_error(exc.http_status, exc.message)
    return None


def as_connect_error(exc: Exception) -> ConnectError | None:
    """envd's answer to a refusal, or None for an error that is not one."""
    if isinstance(exc, ConnectError):
        return exc
    if isinstance(exc, Unauthenticated):
        code = "resource_exhausted" if exc.retry_after is not None else "unauthenticated"
        return ConnectError(code, exc.message)
    if isinstance(exc, ServiceError):
        return ConnectError(_CONNECT_CODES.get(exc.http_status, "internal"), exc.message)
    return None


def connect_error_response(error: ConnectError) -> HttpResponse:
    return HttpResponse(error.body(), status=error.status, content_type="application/json")


def json_body(raw: bytes, limit: int = 64 * 1024) -> dict[str, Any]:
    """A control API request's JSON object (empty body: {}); InvalidInput otherwise."""
    if len(raw) > limit:
        raise InvalidInput(f"the request body is over {limit} bytes")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"the request body is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidInput("the request body must be a JSON object")
    return value
