"""Plain result objects the services return; every interface renders them its own way."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from hosts.backends.base import FileEntry
from sandboxes.models import CommandExecution, Sandbox


@dataclass(frozen=True)
class SandboxInfo:
    id: str
    name: str
    team: str
    owner: str | None
    host: str | None
    image: str
    status: str
    status_message: str
    cpus: float
    memory_mb: int
    pids_limit: int
    network: bool
    created_at: datetime
    started_at: datetime | None
    last_activity_at: datetime
    expires_at: datetime | None

    @classmethod
    def from_model(cls, sandbox: Sandbox) -> SandboxInfo:
        return cls(
            id=sandbox.public_id,
            name=sandbox.name,
            team=sandbox.team.slug,
            owner=sandbox.owner.get_username() if sandbox.owner else None,
            host=sandbox.host.name if sandbox.host else None,
            image=sandbox.image.name,
            status=sandbox.status,
            status_message=sandbox.status_message,
            cpus=sandbox.cpus,
            memory_mb=sandbox.memory_mb,
            pids_limit=sandbox.pids_limit,
            network=sandbox.network,
            created_at=sandbox.created_at,
            started_at=sandbox.started_at,
            last_activity_at=sandbox.last_activity_at,
            expires_at=sandbox.expires_at,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CommandResult:
    id: int
    sandbox_id: str
    command: str
    kind: str
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_bytes: int
    stderr_bytes: int
    duration_seconds: float | None
    error_message: str
    channel: str
    actor: str | None
    created_at: datetime
    finished_at: datetime | None
    background: bool = False  # started with start_background: follow it with check_background

    @classmethod
    def from_model(cls, execution: CommandExecution) -> CommandResult:
        return cls(
            id=execution.pk,
            sandbox_id=execution.sandbox.public_id,
            command=execution.command,
            kind=execution.kind,
            status=execution.status,
            exit_code=execution.exit_code,
            stdout=execution.stdout,
            stderr=execution.stderr,
            stdout_truncated=execution.stdout_truncated,
            stderr_truncated=execution.stderr_truncated,
            stdout_bytes=execution.stdout_bytes,
            stderr_bytes=execution.stderr_bytes,
            duration_seconds=execution.duration_seconds,
            error_message=execution.error_message,
            channel=execution.channel,
            actor=execution.actor.get_username() if execution.actor else None,
            created_at=execution.created_at,
            finished_at=execution.finished_at,
            background=execution.background,
        )

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BackgroundCheck:
    """A background command as check_background / cancel_background see it."""

    id: int  # the CommandExecution id, i.e. the task id start_background returned
    sandbox_id: str
    command: str
    status: str  # running, succeeded, failed, timed_out, cancelled, error
    running: bool
    exit_code: int | None
    output: str  # the last lines of its log: stdout and stderr interleaved, as they came
    output_truncated: bool  # `output` is not the whole log (all of it is at log_path)
    output_bytes: int  # the whole log's size so far
    elapsed_seconds: float | None
    max_runtime_seconds: float
    log_path: str  # inside the sandbox; read or download it with the file tools
    error_message: str
    started_at: datetime | None
    finished_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FileContent:
    path: str
    content: bytes
    offset: int
    size: int  # whole file
    eof: bool  # content reaches the end of the file

    def text(self) -> str | None:
        try:
            return self.content.decode("utf-8")
        except UnicodeDecodeError:
            return None


@dataclass(frozen=True)
class UploadFile:
    path: str
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class UploadResult:
    sandbox_id: str
    paths: list[str]
    total_bytes: int


@dataclass(frozen=True)
class HostInfo:
    name: str
    kind: str
    private: bool
    enabled: bool
    draining: bool
    healthy: bool
    idle_score: float
    cpu_percent: float | None
    memory_percent: float | None
    gpu_percent: float | None
    sandboxes_running: int
    max_sandboxes: int
    last_probe_at: datetime | None
    last_error: str = ""
    details: dict[str, Any] = field(default_factory=dict)


__all__ = [
    "BackgroundCheck",
    "CommandResult",
    "FileContent",
    "FileEntry",
    "HostInfo",
    "SandboxInfo",
    "UploadFile",
    "UploadResult",
]
