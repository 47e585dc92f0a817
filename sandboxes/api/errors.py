"""Every REST error in one shape: `{"detail": "<one readable sentence>", "code": "<machine
code>"}`, plus `"fields": {"<field>": "<what is wrong with it>"}` when the request body had
wrong fields. DRF's own shapes vary: a validation error is a bare `{"field": ["message"]}`
with no detail and no code, the others a `{"detail"}` without a code; a client (the
`sandhub` command, an agent reading the answer) then needs a parser per shape.

The codes are the services' (tenants/errors.py: invalid, not_found, forbidden, conflict,
quota, ...) where DRF means the same thing, else DRF's own (parse_error,
not_authenticated, authentication_failed, method_not_allowed, unsupported_media_type,
not_acceptable).
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.settings import api_settings

# DRF's codes that the services spell otherwise.
_SERVICE_CODES = {
    "permission_denied": "forbidden",
    "throttled": "rate_limited",
}
KEY_HELP = (
    "Send an API key as `Authorization: Bearer shk_...`; create one on the keys page (/keys/) "
    "or with `manage.py create_api_key`."
)
_MAX_DETAIL_CHARS = 500


def error_body(exc: exceptions.APIException, data: Any) -> dict[str, Any]:
    """The body for DRF's exception `exc`, whose response DRF built with `data`."""
    if isinstance(exc, exceptions.ValidationError):
        return _invalid(data)
    code = str(exc.default_code)
    detail = str(data.get("detail", exc.detail)) if isinstance(data, dict) else str(exc.detail)
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        detail = f"{detail.rstrip('.')}. {KEY_HELP}"
    return {"detail": detail, "code": _SERVICE_CODES.get(code, code)}


def _invalid(data: Any) -> dict[str, Any]:
    general: list[str] = []
    fields: dict[str, str] = {}
    if isinstance(data, dict):
        for name, value in data.items():
            if name == api_settings.NON_FIELD_ERRORS_KEY:
                general += _messages(value)
            else:
                _flatten(value, str(name), fields)
    else:
        general += _messages(data)
    parts = general + [f"{name}: {message}" for name, message in fields.items()]
    body: dict[str, Any] = {"detail": _sentence(parts) or "Invalid input.", "code": "invalid"}
    if fields:
        body["fields"] = fields
    return body


def _flatten(value: Any, where: str, into: dict[str, str]) -> None:
    """Nested errors (a list's items, an object's fields) as `files[0].path` paths."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == api_settings.NON_FIELD_ERRORS_KEY:
                _flatten(item, where, into)
            elif isinstance(key, int) or str(key).isdigit():
                _flatten(item, f"{where}[{key}]", into)
            else:
                _flatten(item, f"{where}.{key}", into)
    elif isinstance(value, list) and any(isinstance(item, dict | list) for item in value):
        for index, item in enumerate(value):
            if item:  # a list serializer reports {} for each valid item
                _flatten(item, f"{where}[{index}]", into)
    else:
        messages = _messages(value)
        if messages:
            into[where] = " ".join(messages)


def _messages(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(item) for item in value if not isinstance(item, dict | list)]
    return [str(value)] if value not in (None, "") else []


def _sentence(parts: list[str]) -> str:
    text = "; ".join(part.strip().rstrip(".") for part in parts if part.strip())
    text = f"{text}." if text else ""
    if len(text) > _MAX_DETAIL_CHARS:
        text = text[: _MAX_DETAIL_CHARS - 20].rstrip() + "... (see fields)."
    return text
