"""Interface shapes derived from the service results: one description of each result, the
MCP and REST shapes read from it (names, types, descriptions), their JSON as it always was."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import Field

from mcp_bridge import schemas
from sandboxes.api import serializers
from sandboxes.contract import results
from sandboxes.contract.shapes import Shape, render

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def command(**changes) -> results.CommandResult:
    values = dict(
        id=7,
        sandbox_id="sb_aaaaaaaaaaaa",
        command="pytest",
        kind="command",
        status="failed",
        exit_code=1,
        stdout="out",
        stderr="err",
        stdout_truncated=False,
        stderr_truncated=False,
        stdout_bytes=3,
        stderr_bytes=3,
        duration_seconds=1.5,
        error_message="",
        channel="mcp",
        actor="alice",
        created_at=NOW,
        finished_at=None,
    )
    return results.CommandResult(**(values | changes))


def test_results_are_frozen_and_take_positional_arguments():
    upload = results.UploadFile("a.txt", b"x")
    assert (upload.path, upload.content, upload.mode) == ("a.txt", b"x", 0o644)
    assert upload.as_dict() == {"path": "a.txt", "content": b"x", "mode": 0o644}
    with pytest.raises(ValueError):
        upload.path = "b.txt"  # type: ignore[misc]
    with pytest.raises(TypeError):
        results.UploadFile("a.txt", b"x", 0o644, "extra")


def test_mcp_shapes_keep_their_names_and_read_the_result():
    out = schemas.Command.model_validate(command())
    assert out.model_dump()["command_id"] == 7 and "id" not in out.model_dump()
    assert list(out.model_dump())[:3] == ["command_id", "sandbox_id", "status"]
    started = schemas.BackgroundStarted.model_validate(command(status="running"))
    assert started.model_dump(mode="json") == {
        "task_id": 7,
        "sandbox_id": "sb_aaaaaaaaaaaa",
        "command": "pytest",
        "status": "running",
        "started_at": "2026-01-02T03:04:05Z",
        "resumed_seconds": None,
    }
    # Descriptions come from the result, unless the interface says it otherwise.
    properties = schemas.Command.model_json_schema()["properties"]
    assert properties["stdout"]["description"] == (
        results.CommandResult.model_fields["stdout"].description
    )
    assert (
        "check_background"
        in schemas.BackgroundStarted.model_json_schema()["properties"]["task_id"]["description"]
    )


def test_a_flat_mcp_test_report_reads_the_nested_command_result():
    report = results.TestReport(
        report_found=True,
        passed=1,
        failed=1,
        errors=0,
        skipped=0,
        total=2,
        failures=[results.TestFailure(name="t.x", kind="failure", message="m", details="d")],
        result=command(),
    )
    flat = schemas.TestReport.model_validate(report).model_dump()
    assert list(flat) == [
        "sandbox_id",
        "command",
        "status",
        "exit_code",
        "report_found",
        "passed",
        "failed",
        "errors",
        "skipped",
        "total",
        "failures",
        "stdout",
        "stderr",
        "duration_seconds",
        "command_id",
        "outcome",
        "hint",
    ]
    assert (flat["command_id"], flat["stdout"], flat["failures"][0]["name"]) == (7, "out", "t.x")


def test_render_adds_the_interfaces_own_fields():
    content = results.FileContent(path="/workspace/a", content=b"\xff", offset=0, size=1, eof=True)
    chunk = schemas.file_chunk(content, "auto", "http://x/download")
    assert chunk.model_dump() == {
        "path": "/workspace/a",
        "size": 1,
        "encoding": "base64",
        "content": "/w==",
        "download_url": "http://x/download",
        "offset": 0,
        "returned_bytes": 1,
        "eof": True,
        "resumed_seconds": None,
    }


def test_a_view_of_fields_the_result_lacks_is_refused():
    with pytest.raises(TypeError, match="no field"):

        class Wrong(Shape, source=results.UploadResult, fields="sandbox_id nope"):
            pass

    class Own(Shape, source=results.UploadResult, exclude=("paths", "resumed_seconds")):
        note: str = Field("", description="the interface's own")

    assert list(Own.model_fields) == ["sandbox_id", "total_bytes", "note"]
    shown = render(Own, results.UploadResult(sandbox_id="s", paths=[], total_bytes=0), note="n")
    assert shown.model_dump() == {"sandbox_id": "s", "total_bytes": 0, "note": "n"}


def test_rest_serializers_are_made_from_the_results():
    fields = serializers.CommandSerializer().fields
    assert list(fields) == list(results.CommandResult.model_fields)
    assert fields["stdout"].help_text == results.CommandResult.model_fields["stdout"].description
    assert fields["exit_code"].allow_null and not fields["stdout"].allow_null
    assert serializers.CommandSerializer.__name__ == "CommandSerializer"  # schema: "Command"
    host = serializers.HostSerializer().fields
    assert "last_error" not in host and "details" not in host
    data = serializers.CommandSerializer(command()).data
    assert data["created_at"] == "2026-01-02T03:04:05Z" and data["background"] is False
