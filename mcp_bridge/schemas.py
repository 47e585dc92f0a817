"""Structured tool output: what an agent gets back, built from the services' result objects."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from hosts.backends.base import FileEntry
from sandboxes.results import (
    BackgroundCheck,
    CommandResult,
    FileContent,
    HostInfo,
    SandboxInfo,
    UploadResult,
)

Encoding = Literal["auto", "text", "base64"]


class Sandbox(BaseModel):
    id: str
    name: str
    status: str = Field(description="pending, starting, running, stopping, error, lost, ...")
    status_message: str
    image: str
    host: str | None
    team: str
    owner: str | None
    cpus: float
    memory_mb: int
    network: bool
    created_at: datetime
    last_activity_at: datetime
    expires_at: datetime | None = Field(description="when it is deleted automatically")
    selected: bool = Field(False, description="the default sandbox of this API key")

    @classmethod
    def of(cls, info: SandboxInfo, selected: str = "") -> Sandbox:
        return cls(
            id=info.id,
            name=info.name,
            status=info.status,
            status_message=info.status_message,
            image=info.image,
            host=info.host,
            team=info.team,
            owner=info.owner,
            cpus=info.cpus,
            memory_mb=info.memory_mb,
            network=info.network,
            created_at=info.created_at,
            last_activity_at=info.last_activity_at,
            expires_at=info.expires_at,
            selected=info.id == selected,
        )


class SandboxList(BaseModel):
    sandboxes: list[Sandbox]
    selected: str | None = Field(description="id of this key's selected sandbox, if any")


class ActiveSandbox(BaseModel):
    sandbox: Sandbox | None = Field(description="null when no sandbox is selected")


class Host(BaseModel):
    name: str
    kind: str
    private: bool = Field(description="only this team may use it")
    enabled: bool
    draining: bool
    healthy: bool
    idle_score: float = Field(description="1 = idle, 0 = saturated; new sandboxes go idlest")
    cpu_percent: float | None
    memory_percent: float | None
    gpu_percent: float | None
    sandboxes_running: int
    max_sandboxes: int
    last_probe_at: datetime | None

    @classmethod
    def of(cls, info: HostInfo) -> Host:
        return cls(
            name=info.name,
            kind=info.kind,
            private=info.private,
            enabled=info.enabled,
            draining=info.draining,
            healthy=info.healthy,
            idle_score=info.idle_score,
            cpu_percent=info.cpu_percent,
            memory_percent=info.memory_percent,
            gpu_percent=info.gpu_percent,
            sandboxes_running=info.sandboxes_running,
            max_sandboxes=info.max_sandboxes,
            last_probe_at=info.last_probe_at,
        )


class HostList(BaseModel):
    hosts: list[Host]


class Command(BaseModel):
    command_id: int = Field(description="id in the command history")
    sandbox_id: str
    status: str = Field(description="succeeded, failed (non-zero exit), timed_out or error")
    exit_code: int | None
    stdout: str = Field(description="head and tail kept when long, with a '[N bytes cut]' mark")
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_bytes: int = Field(description="bytes the command wrote, including any cut")
    stderr_bytes: int
    duration_seconds: float | None
    error_message: str

    @classmethod
    def of(cls, result: CommandResult) -> Command:
        return cls(
            command_id=result.id,
            sandbox_id=result.sandbox_id,
            status=result.status,
            exit_code=result.exit_code,
            stdout=result.stdout,
            stderr=result.stderr,
            stdout_truncated=result.stdout_truncated,
            stderr_truncated=result.stderr_truncated,
            stdout_bytes=result.stdout_bytes,
            stderr_bytes=result.stderr_bytes,
            duration_seconds=result.duration_seconds,
            error_message=result.error_message,
        )


class FilesWritten(BaseModel):
    sandbox_id: str
    paths: list[str]
    total_bytes: int

    @classmethod
    def of(cls, result: UploadResult) -> FilesWritten:
        return cls(sandbox_id=result.sandbox_id, paths=result.paths, total_bytes=result.total_bytes)


class File(BaseModel):
    path: str
    size: int
    encoding: Literal["text", "base64"]
    content: str
    download_url: str = Field(
        description="HTTP download of the whole file (Bearer key or a signed-in browser)"
    )


class FileList(BaseModel):
    files: list[File]
    total_bytes: int


class FileChunk(File):
    offset: int
    returned_bytes: int
    eof: bool = Field(description="false: call again with offset + returned_bytes for more")

    @classmethod
    def of(cls, result: FileContent, encoding: Encoding, url: str) -> FileChunk:
        kind, text = encode(result.content, encoding)
        return cls(
            path=result.path,
            download_url=url,
            size=result.size,
            encoding=kind,
            content=text,
            offset=result.offset,
            returned_bytes=len(result.content),
            eof=result.eof,
        )


class Entry(BaseModel):
    name: str
    path: str
    kind: str = Field(description="file, dir, link or other")
    size: int
    mtime: float
    mode: str

    @classmethod
    def of(cls, entry: FileEntry) -> Entry:
        return cls(
            name=entry.name,
            path=entry.path,
            kind=entry.kind,
            size=entry.size,
            mtime=entry.mtime,
            mode=entry.mode,
        )


class Listing(BaseModel):
    path: str
    entries: list[Entry]


class TestFailure(BaseModel):
    __test__ = False  # not a pytest test class

    name: str = Field(description="classname.name, e.g. tests.test_calc.test_add")
    kind: Literal["failure", "error"]
    message: str
    details: str = Field(description="the start of the traceback or captured output")


class TestReport(BaseModel):
    __test__ = False

    sandbox_id: str
    command: str
    status: str = Field(description="status of the test command itself")
    exit_code: int | None
    report_found: bool = Field(description="false: no JUnit XML; counts are then unknown (0)")
    passed: int
    failed: int
    errors: int
    skipped: int
    total: int
    failures: list[TestFailure] = Field(description="failed and erroring tests, first 50")
    stdout: str
    stderr: str
    duration_seconds: float | None
    command_id: int


class RunOnce(BaseModel):
    sandbox_id: str
    result: Command
    deleted: bool


def encode(content: bytes, encoding: Encoding) -> tuple[Literal["text", "base64"], str]:
    """Text when asked or when it is valid UTF-8 ('auto'); base64 otherwise."""
    if encoding != "base64":
        try:
            return "text", content.decode("utf-8")
        except UnicodeDecodeError:
            if encoding == "text":
                return "text", content.decode("utf-8", errors="replace")
    return "base64", base64.b64encode(content).decode("ascii")


class BackgroundStarted(BaseModel):
    task_id: int = Field(
        description="pass it to check_background / cancel_background; also its command_id "
        "in the history"
    )
    sandbox_id: str
    command: str
    status: str = Field(description="running once started")
    started_at: datetime | None

    @classmethod
    def of(cls, result: CommandResult) -> BackgroundStarted:
        return cls(
            task_id=result.id,
            sandbox_id=result.sandbox_id,
            command=result.command,
            status=result.status,
            started_at=result.created_at,
        )


class BackgroundStatus(BaseModel):
    task_id: int
    sandbox_id: str
    command: str
    running: bool
    status: str = Field(
        description="running, succeeded, failed (non-zero exit), timed_out (killed at its "
        "max_runtime_seconds), cancelled, or error (it could not run, or its sandbox went)"
    )
    exit_code: int | None = Field(description="null while it runs")
    output: str = Field(
        description="the last lines of its log, stdout and stderr interleaved as they came"
    )
    output_truncated: bool = Field(description="false: output is the whole log so far")
    output_bytes: int = Field(description="size of the whole log so far")
    elapsed_seconds: float | None = Field(description="so far while it runs; start to end after")
    max_runtime_seconds: float = Field(description="it is killed (timed_out) after this long")
    log_path: str = Field(description="the whole log in the sandbox, for read_file")
    error_message: str
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, check: BackgroundCheck) -> BackgroundStatus:
        return cls(
            task_id=check.id,
            sandbox_id=check.sandbox_id,
            command=check.command,
            running=check.running,
            status=check.status,
            exit_code=check.exit_code,
            output=check.output,
            output_truncated=check.output_truncated,
            output_bytes=check.output_bytes,
            elapsed_seconds=check.elapsed_seconds,
            max_runtime_seconds=check.max_runtime_seconds,
            log_path=check.log_path,
            error_message=check.error_message,
            started_at=check.started_at,
            finished_at=check.finished_at,
        )
