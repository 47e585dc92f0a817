"""The tenancy matrix's checks of the MCP tools that name no id (test_matrix.py): each acts
in the key's team only and shows nothing of team B. Not a test module."""

from __future__ import annotations

REFUSED_WRITERS = {"viewer": "a viewer may not", "read-only": "no write scope"}


def text_of(result) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


def tool_hosts(scene, actor, result, created) -> None:
    assert not result.is_error, text_of(result)
    counts = [host["sandboxes_running"] for host in result.structured_content["hosts"]]
    assert counts == [scene.team_a_live()], "a host's count must be the team's own"


def tool_listed(scene, actor, result, created) -> None:
    assert not result.is_error, text_of(result)
    listed = {s["id"] for s in result.structured_content["sandboxes"]}
    assert listed and listed <= scene.team_a_ids()


def tool_active(scene, actor, result, created) -> None:
    """Called with the session's selection forged to team B's sandbox: nothing is active."""
    assert not result.is_error, text_of(result)
    assert result.structured_content["sandbox"] is None


def tool_creates(scene, actor, result, created) -> None:
    made = created()
    if actor in REFUSED_WRITERS:
        assert result.is_error and REFUSED_WRITERS[actor] in text_of(result), text_of(result)
        assert made == []
        return
    assert not result.is_error, text_of(result)
    assert made and set(made) <= scene.team_a_ids(), made
