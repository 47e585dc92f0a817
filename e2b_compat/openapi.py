"""The OpenAPI description of the E2B control API as Sandhub serves it (GET /e2b/openapi.json):
E2B's operations and names, limited to what control.py does. The schema fuzzer
(tests/security/test_e2b_fuzz.py) sends requests from it."""

from __future__ import annotations

from typing import Any

__all__ = ["DOCUMENT"]

_ID = {"name": "sandbox_id", "in": "path", "required": True, "schema": {"type": "string"}}
_ERROR = {
    "description": "refused (E2B's Error)",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
            }
        }
    },
}
_REFUSALS = {str(code): _ERROR for code in (400, 401, 403, 404, 409, 429, 502, 503)}
_TIMEOUT = {
    "type": "object",
    "properties": {"timeout": {"type": "integer", "minimum": 1}},
}
_SANDBOX = {
    "type": "object",
    "required": ["sandboxID", "templateID", "clientID", "envdVersion"],
    "properties": {
        "sandboxID": {"type": "string"},
        "templateID": {"type": "string"},
        "clientID": {"type": "string"},
        "envdVersion": {"type": "string"},
        "envdAccessToken": {"type": "string"},
        "domain": {"type": ["string", "null"]},
        "alias": {"type": "string"},
    },
}
_LISTED = {
    "type": "object",
    "required": ["sandboxID", "templateID", "clientID", "startedAt", "endAt", "state"],
    "properties": {
        "sandboxID": {"type": "string"},
        "templateID": {"type": "string"},
        "clientID": {"type": "string"},
        "startedAt": {"type": "string"},
        "endAt": {"type": "string"},
        "cpuCount": {"type": "integer"},
        "memoryMB": {"type": "integer"},
        "diskSizeMB": {"type": "integer"},
        "metadata": {"type": "object"},
        "state": {"type": "string", "enum": ["running", "paused"]},
        "envdVersion": {"type": "string"},
    },
}
_NEW = {
    "type": "object",
    "properties": {
        "templateID": {"type": "string"},
        "timeout": {"type": "integer", "minimum": 1},
        "envVars": {"type": "object", "additionalProperties": {"type": "string"}},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "allow_internet_access": {"type": "boolean"},
        "autoPause": {"type": "boolean"},
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": False, "content": {"application/json": {"schema": schema}}}


_LIST = {
    "parameters": [
        {"name": "state", "in": "query", "schema": {"type": "string"}},
        {"name": "metadata", "in": "query", "schema": {"type": "string"}},
        {"name": "template", "in": "query", "schema": {"type": "string"}},
        {"name": "startedAfter", "in": "query", "schema": {"type": "string"}},
        {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
        {"name": "nextToken", "in": "query", "schema": {"type": "string"}},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}},
    ],
    "responses": {
        "200": _json({"type": "array", "items": _LISTED}, "the team's sandboxes"),
        **_REFUSALS,
    },
}
_CREATE = {
    "requestBody": _body(_NEW),
    "responses": {"201": _json(_SANDBOX, "created"), **_REFUSALS},
}
_BACK_UP = {
    "parameters": [_ID],
    "requestBody": _body(_TIMEOUT),
    "responses": {
        "200": _json(_SANDBOX, "running already"),
        "201": _json(_SANDBOX, "resumed"),
        **_REFUSALS,
    },
}
_DONE = {"204": {"description": "done"}, **_REFUSALS}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Sandhub: E2B's control API", "version": "1"},
    "components": {
        "securitySchemes": {"ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}
    },
    "security": [{"ApiKey": []}],
    "paths": {
        "/sandboxes": {"get": _LIST, "post": _CREATE},
        "/v2/sandboxes": {"get": _LIST, "post": _CREATE},
        "/sandboxes/{sandbox_id}": {
            "get": {
                "parameters": [_ID],
                "responses": {"200": _json(_LISTED, "the sandbox"), **_REFUSALS},
            },
            "delete": {"parameters": [_ID], "responses": _DONE},
        },
        "/sandboxes/{sandbox_id}/timeout": {
            "post": {"parameters": [_ID], "requestBody": _body(_TIMEOUT), "responses": _DONE}
        },
        "/sandboxes/{sandbox_id}/pause": {"post": {"parameters": [_ID], "responses": _DONE}},
        "/sandboxes/{sandbox_id}/resume": {"post": _BACK_UP},
        "/sandboxes/{sandbox_id}/connect": {"post": _BACK_UP},
        "/v2/sandboxes/{sandbox_id}/connect": {"post": _BACK_UP},
    },
}
