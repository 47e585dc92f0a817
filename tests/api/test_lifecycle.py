"""POST /api/v1/sandboxes/{id}/pause/, /resume/ and /stop/ on the real Docker engine: the
answers, a command's resumed_seconds, the refusals (a viewer's key, a deleted sandbox, a
full running quota). The rules themselves: tests/services/test_lifecycle*.py."""

from __future__ import annotations

import pytest

from sandboxes import services
from tests.api.helpers import API, client_for

pytestmark = pytest.mark.docker


def test_pause_resume_stop_over_rest(world):
    client = client_for(world, "alice")
    sandbox_id = services.create_sandbox(world.principal(), memory_mb=128).id
    base = f"{API}/sandboxes/{sandbox_id}"
    try:
        paused = client.post(f"{base}/pause/")
        assert paused.status_code == 200, paused.content
        body = paused.json()
        assert (body["changed"], body["sandbox"]["status"]) == (True, "paused")
        assert body["sandbox"]["paused_at"] and body["seconds"] is not None
        assert client.get(f"{base}/").json()["status"] == "paused"

        viewer = client_for(world, "victor").post(f"{base}/stop/")
        assert viewer.status_code == 403 and "viewer" in viewer.json()["detail"]

        ran = client.post(f"{base}/commands/", {"command": "echo up"}, format="json")
        assert ran.status_code == 201, ran.content
        assert ran.json()["stdout"] == "up\n" and ran.json()["resumed_seconds"] is not None

        stopped = client.post(f"{base}/stop/")
        assert stopped.status_code == 200 and stopped.json()["sandbox"]["status"] == "stopped"
        resumed = client.post(f"{base}/resume/")
        assert resumed.status_code == 200, resumed.content
        assert resumed.json()["previous_status"] == "stopped"
        assert resumed.json()["sandbox"]["status"] == "running"
    finally:
        services.delete_sandbox(world.principal(), sandbox_id)
    gone = client.post(f"{base}/resume/")
    assert gone.status_code == 409 and "was deleted" in gone.json()["detail"]
