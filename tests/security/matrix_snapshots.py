"""The tenancy matrix's cases for snapshots (test_matrix.py takes them): every snapshot route
and tool with team B's snapshot or sandbox answers as a made-up id does; the listings show
team A's snapshots only. Not a test module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.security.matrix import B_SB, B_SNAP

SNAPSHOT_B = [{"snapshot_id": B_SNAP}]


def rest_cases(case: Callable[..., Any]) -> dict[tuple[str, str], Any]:
    return {
        ("snapshots", "GET"): case(scoped=rest_listed),
        # No id in its URL: team B's sandbox in its body (filled in like a URL's ids).
        ("snapshots", "POST"): case([{}], json={"sandbox_id": B_SB, "name": "pwned"}),
        ("snapshot", "GET"): case(SNAPSHOT_B),
        ("snapshot", "DELETE"): case(SNAPSHOT_B),
    }


def tool_cases(case: Callable[..., Any], text_of: Callable[[Any], str]) -> dict[str, Any]:
    def listed(scene, actor, result, created) -> None:
        assert not result.is_error, text_of(result)
        found = {s["id"] for s in result.structured_content["snapshots"]}
        assert found and found <= scene.team_a_snapshots()

    on_b = [{"sandbox_id": B_SB}]
    return {
        "snapshot_sandbox": case([{**on_b[0], "name": "pwned"}], write=True),
        "list_snapshots": case(scoped=listed),
        "delete_snapshot": case(SNAPSHOT_B, write=True),
        "fork_sandbox": case(on_b, write=True),
    }


def rest_listed(scene, actor, response, created) -> None:
    assert response.status_code == 200, response.text
    found = {s["id"] for s in response.json()["results"]}
    assert found and found <= scene.team_a_snapshots()
