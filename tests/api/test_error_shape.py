"""Every REST error in the shape the README promises: `{"detail": "<one sentence>", "code":
"<machine code>"}`, plus `fields` (each wrong field and what is wrong) for invalid input; for
validation, parse, authentication, permission, not-found, method and media-type errors on
several endpoints, and in the OpenAPI schema."""

from __future__ import annotations

import pytest

from tests.api.helpers import API, client_for

pytestmark = pytest.mark.docker

NOPE = "sb_nope00000000"


def _error(response, status: int, code: str) -> dict:
    body = response.json()
    assert response.status_code == status, body
    assert set(body) <= {"detail", "code", "fields"}, body
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"], body
    assert "\n" not in body["detail"] and "ErrorDetail" not in body["detail"], body
    return body


def test_invalid_input_names_each_field_in_detail_and_fields(world):
    client = client_for(world, "alice")
    unknown = _error(client.post(f"{API}/sandboxes/", {"cpu": 1}, format="json"), 400, "invalid")
    assert unknown["fields"] == {"cpu": "unknown field"}
    assert (
        unknown["detail"].startswith("known fields: ") and "cpu: unknown field" in unknown["detail"]
    )

    two = _error(
        client.post(f"{API}/sandboxes/", {"cpus": "lots", "memory_mb": "x"}, format="json"),
        400,
        "invalid",
    )
    assert two["fields"] == {
        "cpus": "A valid number is required.",
        "memory_mb": "A valid integer is required.",
    }
    assert (
        two["detail"] == "cpus: A valid number is required; memory_mb: A valid integer is required."
    )

    nested = _error(
        client.post(
            f"{API}/run-once/",
            {
                "command": "true",
                "files": [{"path": "ok", "content": ""}, {"content": "x", "executable": "maybe"}],
            },
            format="json",
        ),
        400,
        "invalid",
    )
    assert nested["fields"] == {
        "files[1].path": "This field is required.",
        "files[1].executable": "Must be a valid boolean.",
    }

    command = _error(
        client.post(f"{API}/sandboxes/{NOPE}/commands/", {"command": ["ls"]}, format="json"),
        400,
        "invalid",
    )
    assert command["fields"] == {"command": "Not a valid string."}


def test_parse_media_type_method_and_not_found_errors(world):
    client = client_for(world, "alice")
    parse = _error(
        client.post(f"{API}/sandboxes/", "{not json", content_type="application/json"),
        400,
        "parse_error",
    )
    assert parse["detail"].startswith("JSON parse error")
    _error(
        client.post(f"{API}/sandboxes/", "name=x", content_type="text/plain"),
        415,
        "unsupported_media_type",
    )
    _error(client.delete(f"{API}/hosts/"), 405, "method_not_allowed")
    missing = _error(client.get(f"{API}/sandboxes/{NOPE}/"), 404, "not_found")
    assert NOPE in missing["detail"]
    _error(client.get(f"{API}/commands/999999/"), 404, "not_found")


def test_authentication_and_permission_errors(world):
    nobody = _error(client_for(world, None).get(f"{API}/sandboxes/"), 401, "not_authenticated")
    revoked = _error(
        client_for(world, "revoked").get(f"{API}/sandboxes/"), 401, "authentication_failed"
    )
    for body in (nobody, revoked):
        assert "/keys/" in body["detail"] and "manage.py create_api_key" in body["detail"]
    reader = client_for(world, "alice_read")
    _error(reader.post(f"{API}/sandboxes/", {}, format="json"), 403, "forbidden")


def test_the_schema_documents_the_error_shape(world):
    schema = client_for(world, "alice").get("/api/schema/", {"format": "json"}).json()
    error = schema["components"]["schemas"]["Error"]
    assert set(error["properties"]) == {"detail", "code", "fields"}
    assert set(error["required"]) == {"detail", "code"}
    assert error["properties"]["fields"]["additionalProperties"]["type"] == "string"
