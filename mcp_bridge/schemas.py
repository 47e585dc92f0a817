"""Structured tool output: what an agent gets back.

Each shape is a view of a service result (sandboxes.contract.results and .shapes): the
fields, types and descriptions come from the result; here only the choice of fields, MCP's own names
(command_id / task_id for a command's id) and MCP's own fields (selected, download_url, the
encoded content) are declared.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from sandboxes.contract import results
from sandboxes.contract.shapes import Shape, render

Encoding = Literal["auto", "text", "base64"]
DOWNLOAD_URL = "HTTP download of the whole file (Bearer key or a signed-in browser)"

# --- sandboxes and hosts ---------------------------------------------------------------------

_SANDBOX_FIELDS = (
    "id name status status_message image host team owner cpus memory_mb disk_mb network "
    "network_mode egress created_at last_activity_at expires_at paused_at stopped_at selected"
)


class Sandbox(Shape, source=results.SandboxInfo, fields=_SANDBOX_FIELDS):
    selected: bool = Field(False, description="the sandbox selected in this MCP session")


def sandbox(info: results.SandboxInfo, selected: str = "") -> Sandbox:
    """The sandbox as MCP shows it; `selected` is the session's selected sandbox id, if any."""
    return render(Sandbox, info, selected=info.id == selected)


class SandboxList(BaseModel):
    sandboxes: list[Sandbox]
    selected: str | None = Field(description="id of this MCP session's selected sandbox, if any")


class ActiveSandbox(BaseModel):
    sandbox: Sandbox | None = Field(description="null when no sandbox is selected")


class Host(Shape, source=results.HostInfo, exclude=("last_error", "details")):
    pass


class HostList(BaseModel):
    hosts: list[Host]


# --- commands --------------------------------------------------------------------------------


class Command(
    Shape,
    source=results.CommandResult,
    rename={"command_id": "id"},
    exclude=("command", "kind", "channel", "actor", "created_at", "finished_at", "background"),
):
    pass


class CommandLog(
    Shape,
    source=results.CommandResult,
    rename={"command_id": "id"},
    fields="command_id command kind status exit_code channel actor created_at "
    "duration_seconds stdout_tail stderr_tail error_message",
):
    """A command in the sandbox://{id}/logs resource: the tails of its output."""

    stdout_tail: str
    stderr_tail: str


_REPORT_FIELDS = (
    "sandbox_id command status exit_code report_found passed failed errors skipped total "
    "failures stdout stderr duration_seconds command_id outcome hint"
)
_FROM_RESULT = "sandbox_id command status exit_code stdout stderr duration_seconds"


class TestReport(
    Shape,
    source=results.TestReport,
    fields=_REPORT_FIELDS,
    # Flat, as MCP has always shown it: the test command's result beside the counts.
    rename={"command_id": "result.id"} | {name: f"result.{name}" for name in _FROM_RESULT.split()},
    describe={
        "status": "status of the test command itself",
        "command_id": "the test command's id in the command history",
    },
):
    __test__ = False  # not a pytest test class


class RunOnce(Shape, source=results.RunOnceResult, types={"result": Command}):
    pass


class BackgroundStarted(
    Shape,
    source=results.CommandResult,
    fields=("task_id", "sandbox_id", "command", "status", "started_at", "resumed_seconds"),
    rename={"task_id": "id", "started_at": "created_at"},
    types={"started_at": datetime | None},
    describe={
        "task_id": "pass it to check_background / cancel_background; also its command_id "
        "in the history",
        "status": "running once started",
    },
):
    pass


_STATUS_FIELDS = (
    "task_id sandbox_id command running status exit_code output output_truncated output_bytes "
    "elapsed_seconds max_runtime_seconds log_path error_message started_at finished_at "
    "resumed_seconds out_of_memory"
)


class BackgroundStatus(
    Shape, source=results.BackgroundCheck, fields=_STATUS_FIELDS, rename={"task_id": "id"}
):
    pass


# --- files -----------------------------------------------------------------------------------


class FilesWritten(Shape, source=results.UploadResult):
    pass


class Entry(Shape, source=results.FileEntry):
    pass


class Listing(BaseModel):
    path: str
    entries: list[Entry]
    resumed_seconds: float | None = Field(None, description=results.RESUMED_SECONDS)


# One file of download_files: the service gives (path, content) pairs, not a result.
class File(BaseModel):
    path: str
    size: int
    encoding: Literal["text", "base64"]
    content: str
    download_url: str = Field(description=DOWNLOAD_URL)


class FileList(BaseModel):
    files: list[File]
    total_bytes: int
    resumed_seconds: float | None = Field(None, description=results.RESUMED_SECONDS)


class FileChunk(
    Shape,
    source=results.FileContent,
    fields=(
        "path",
        "size",
        "encoding",
        "content",
        "download_url",
        "offset",
        "returned_bytes",
        "eof",
        "resumed_seconds",
    ),
    describe={"size": None, "eof": "false: call again with offset + returned_bytes for more"},
):
    encoding: Literal["text", "base64"]
    content: str  # the file's bytes as text or base64 (the result holds bytes)
    download_url: str = Field(description=DOWNLOAD_URL)
    returned_bytes: int


def file_chunk(result: results.FileContent, encoding: Encoding, url: str) -> FileChunk:
    kind, text = encode(result.content, encoding)
    return render(
        FileChunk,
        result,
        encoding=kind,
        content=text,
        download_url=url,
        returned_bytes=len(result.content),
    )


def encode(content: bytes, encoding: Encoding) -> tuple[Literal["text", "base64"], str]:
    """Text when asked or when it is valid UTF-8 ('auto'); base64 otherwise."""
    if encoding != "base64":
        try:
            return "text", content.decode("utf-8")
        except UnicodeDecodeError:
            if encoding == "text":
                return "text", content.decode("utf-8", errors="replace")
    return "base64", base64.b64encode(content).decode("ascii")
