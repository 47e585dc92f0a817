"""Delete, rename and new folder over REST on a live server and real Docker: what they answer,
the {"detail", "code"} of each refusal, and the endpoints in the OpenAPI schema."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from sandboxes import services

pytestmark = pytest.mark.docker


def http(asgi_server: str, world, key: str = "alice") -> httpx.Client:
    return httpx.Client(
        base_url=f"{asgi_server}/api/v1",
        headers={"Authorization": f"Bearer {world.keys[key]}"},
        timeout=120,
    )


def test_mkdir_rename_delete_and_their_refusals(asgi_server, world, shared_sandbox) -> None:
    base = f"/sandboxes/{shared_sandbox}/files/"
    services.write_file(world.principal(), shared_sandbox, "rest/a.txt", "a")
    with http(asgi_server, world) as client:
        made = client.post(base + "mkdir/", json={"path": "rest/made"})
        assert made.status_code == 201, made.text
        assert made.json() == {
            "sandbox_id": shared_sandbox,
            "action": "mkdir",
            "path": "/workspace/rest/made",
            "to": None,
            "resumed_seconds": None,
        }
        moved = client.post(base + "rename/", json={"path": "rest/a.txt", "to": "rest/made/b.txt"})
        assert moved.status_code == 200 and moved.json()["to"] == "/workspace/rest/made/b.txt"
        listed = client.get(base, params={"path": "rest/made"}).json()["results"]
        assert [e["name"] for e in listed] == ["b.txt"]

        again = client.post(base + "mkdir/", json={"path": "rest/made"})
        assert again.status_code == 409 and again.json()["code"] == "conflict"
        missing = client.post(base + "rename/", json={"path": "rest/none", "to": "x"})
        assert missing.status_code == 404 and "not found" in missing.json()["detail"]
        outside = client.delete(base, params={"path": "/etc/passwd"})
        assert outside.status_code == 400 and "inside /workspace" in outside.json()["detail"]
        unknown = client.post(base + "mkdir/", json={"path": "x", "parents": True})
        assert unknown.status_code == 400
        nothing = client.delete(base)
        assert nothing.status_code == 400 and "?path=" in nothing.json()["detail"]

        gone = client.delete(base, params={"path": "rest"})
        assert gone.status_code == 200 and gone.json()["action"] == "delete"
        assert client.get(base, params={"path": "rest"}).status_code == 404
    with http(asgi_server, world, "victor") as viewer:
        refused = viewer.post(base + "mkdir/", json={"path": "viewer-was-here"})
        assert refused.status_code == 403 and "viewer" in refused.json()["detail"]


def test_the_schema_describes_them(asgi_server, world) -> None:
    with httpx.Client(base_url=asgi_server, timeout=60) as client:
        schema = client.get("/api/schema/", params={"format": "json"})
    assert schema.status_code == 200, schema.text[:300]
    paths = schema.json()["paths"]
    files = "/api/v1/sandboxes/{sandbox_id}/files/"
    assert "delete" in paths[files]
    assert "post" in paths[files + "rename/"] and "post" in paths[files + "mkdir/"]
    assert "FileChange" in str(paths[files + "rename/"]["post"]["responses"]["200"])
