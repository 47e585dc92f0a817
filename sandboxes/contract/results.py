"""The result objects the services return: the one description of each result.

Every interface renders these its own way, and every interface's output shape is derived from
them (sandboxes/contract/shapes.py: a chosen subset of fields, renamed where an interface has always
named a field differently, plus the interface's own fields) instead of repeating the fields
and their descriptions. Models are frozen and read attributes (`from_attributes`), so a result
can be built from any object with the same attribute names (e.g. a backend's file entry).
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from sandboxes.contract.egress import EgressBlock
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.outcomes import OUT_OF_MEMORY, TEST_HINT, TEST_OUTCOME, killed_for_memory
from sandboxes.contract.streams import FileStream

RESUMED_SECONDS = "seconds spent resuming the (paused or stopped) sandbox first; null: it ran"

if TYPE_CHECKING:
    from sandboxes.models import CommandExecution, Preview, Sandbox


class Result(BaseModel):
    """A frozen result; positional arguments are taken in field order, as the dataclasses
    these replaced took them."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    def __init__(self, *args: Any, **data: Any) -> None:
        if args:
            names = list(type(self).model_fields)
            if len(args) > len(names):
                raise TypeError(f"{type(self).__name__} takes at most {len(names)} arguments")
            for name, value in zip(names, args, strict=False):
                if name in data:
                    raise TypeError(f"{type(self).__name__} got {name!r} twice")
                data[name] = value
        super().__init__(**data)

    @classmethod
    def read(cls, source: object, **values: Any) -> Self:
        """The result of `source`: each field not given in `values` is the source's attribute
        of the same name."""
        missing = {name: getattr(source, name) for name in cls.model_fields if name not in values}
        return cls(**missing, **values)

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


# --- sandboxes and hosts ---------------------------------------------------------------------


class SandboxInfo(Result):
    id: str
    name: str
    team: str
    owner: str | None
    host: str | None
    image: str
    status: str = Field(description="running, paused (memory kept), stopped (files kept), ...")
    status_message: str
    cpus: float
    memory_mb: int
    pids_limit: int
    network: bool
    created_at: datetime
    started_at: datetime | None
    last_activity_at: datetime
    expires_at: datetime | None = Field(description="when it is deleted automatically")
    disk_mb: int | None = Field(default=None, description="size of /workspace in MB")
    paused_at: datetime | None = Field(None, description="when it was paused, if it is")
    stopped_at: datetime | None = Field(None, description="when it was stopped, if it is")
    network_mode: str = Field("off", description="off, allowlist or public (network: not off)")
    egress: EgressBlock | None = Field(None, description="get_sandbox's: policy and refusals")
    metadata: dict[str, str] = Field(
        default_factory=dict, description="labels its creator gave (string keys and values)"
    )

    @classmethod
    def from_model(cls, sandbox: Sandbox, egress: EgressBlock | None = None) -> SandboxInfo:
        return cls.read(
            sandbox,
            network_mode=sandbox.egress_mode,
            egress=egress,
            id=sandbox.public_id,
            team=sandbox.team.slug,
            owner=sandbox.owner.get_username() if sandbox.owner else None,
            host=sandbox.host.name if sandbox.host else None,
            image=sandbox.image.name,
        )


class GpuInfo(Result):
    """One GPU of a host as its last probe saw it (nvidia-smi)."""

    index: int
    name: str = ""
    utilization_percent: float | None = None
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    busy_percent: float = Field(0.0, description="max(utilization, memory in use), 0-100")


class HostInfo(Result):
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
    sandboxes_running: int = Field(
        description="running sandboxes of your team on it (every team's for platform admins)"
    )
    max_sandboxes: int
    last_probe_at: datetime | None
    last_error: str = ""
    gpus: list[GpuInfo] = Field(default_factory=list, description="per GPU, from the last probe")
    details: dict[str, Any] = Field(default_factory=dict)


class HostKeyInfo(Result):
    """An SSH host's key: what it presents and what is pinned (confirmed by an admin)."""

    host: str
    key_type: str
    fingerprint: str = Field(description="what the host presents, SHA256:...")
    pinned: str = Field(description="the confirmed fingerprint; empty until one is confirmed")

    @property
    def confirmed(self) -> bool:
        return bool(self.pinned) and self.pinned == self.fingerprint


# --- commands --------------------------------------------------------------------------------


class CommandResult(Result):
    id: int = Field(description="id in the command history")
    sandbox_id: str
    command: str
    kind: str
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
    channel: str
    actor: str | None
    created_at: datetime
    finished_at: datetime | None
    background: bool = Field(False, description="started in the background: follow it with "
        "check_background (MCP) or at .../background/{id}/ (REST)")  # fmt: skip
    resumed_seconds: float | None = Field(None, description=RESUMED_SECONDS)
    out_of_memory: bool = Field(False, description=OUT_OF_MEMORY)

    @classmethod
    def from_model(cls, execution: CommandExecution) -> CommandResult:
        return cls.read(
            execution,
            out_of_memory=killed_for_memory(execution.exit_code, execution.stderr),
            id=execution.pk,
            sandbox_id=execution.sandbox.public_id,
            actor=execution.actor.get_username() if execution.actor else None,
            resumed_seconds=execution.sandbox.resumed_seconds,
        )

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


class BackgroundCheck(Result):
    """A background command as check_background / cancel_background see it."""

    id: int = Field(description="the command's id, returned when it was started")
    sandbox_id: str
    command: str
    status: str = Field(
        description="running, succeeded, failed (non-zero exit), timed_out (killed at its "
        "max_runtime_seconds), cancelled, or error (it could not run, or its sandbox went)"
    )
    running: bool
    exit_code: int | None = Field(description="null while it runs")
    output: str = Field(
        description="the last tail_lines lines of its log, stdout and stderr interleaved as "
        "they came"
    )
    output_truncated: bool = Field(description="false: output is the whole log so far")
    output_bytes: int = Field(description="size of the whole log so far")
    elapsed_seconds: float | None = Field(description="so far while it runs; start to end after")
    max_runtime_seconds: float = Field(description="it is killed (timed_out) after this long")
    log_path: str = Field(description="the whole log, in the sandbox (read_file, or the files API)")
    error_message: str
    started_at: datetime | None
    finished_at: datetime | None
    resumed_seconds: float | None = Field(None, description=RESUMED_SECONDS)
    out_of_memory: bool = Field(False, description=OUT_OF_MEMORY)


# --- files -----------------------------------------------------------------------------------


class FileEntry(Result):
    """One entry of a directory listing (built from the backend's entries by attribute)."""

    name: str
    path: str
    kind: str = Field(description="file, dir, link or other")
    size: int
    mtime: float
    mode: str


class FileContent(Result):
    path: str
    content: bytes
    offset: int
    size: int = Field(description="size of the whole file")
    eof: bool = Field(description="content reaches the end of the file")
    resumed_seconds: float | None = Field(None, description=RESUMED_SECONDS)

    def text(self) -> str | None:
        try:
            return self.content.decode("utf-8")
        except UnicodeDecodeError:
            return None


class UploadFile(Result):
    path: str
    content: bytes
    mode: int = 0o644

    @classmethod
    def inline(
        cls, path: str, content: str, *, encoding: str = "text", executable: bool = False
    ) -> UploadFile:
        """A file given inline in a request: text, or base64 of any bytes."""
        if encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise InvalidInput("content is not base64") from exc
        else:
            data = content.encode("utf-8")
        return cls(path=path, content=data, mode=0o755 if executable else 0o644)


class UploadResult(Result):
    sandbox_id: str
    paths: list[str]
    total_bytes: int
    resumed_seconds: float | None = Field(None, description=RESUMED_SECONDS)


# --- previews --------------------------------------------------------------------------------


class PreviewInfo(Result):
    """A port of a sandbox reachable through the platform."""

    id: int = Field(description="the preview's id (its tokens name it)")
    sandbox_id: str
    port: int
    public: bool = Field(description="anyone with the address may open it, no token needed")
    created_by: str | None
    created_at: datetime
    stopped_at: datetime | None = Field(description="null while it is open")
    command_id: int | None = Field(description="the background command serving it (deploy_app)")

    @classmethod
    def from_model(cls, preview: Preview) -> PreviewInfo:
        return cls.read(
            preview,
            sandbox_id=preview.sandbox.public_id,
            created_by=preview.created_by.get_username() if preview.created_by else None,
        )


class PreviewLink(Result):
    """An open preview and a token that opens it without a session, until expires_at."""

    sandbox_id: str
    port: int
    preview_id: int
    public: bool = Field(description="anyone with the address may open it, no token needed")
    token: str = Field(description="random; opens this preview only, until expires_at")
    link_id: str = Field(description="the token's id: list_links shows it, revoke_link takes it")
    expires_at: datetime


class DeployedApp(Result):
    """An app started as a background command, answering on its port, with its preview."""

    sandbox_id: str
    port: int
    preview_id: int
    command_id: int = Field(
        description="its background command: check_background / cancel_background take it"
    )
    token: str = Field(description="random; opens this preview only, until expires_at")
    link_id: str = Field(description="the token's id: list_links shows it, revoke_link takes it")
    expires_at: datetime


# --- workflows -------------------------------------------------------------------------------


class TestFailure(Result):
    __test__ = False  # not a pytest test class
    name: str = Field(description="classname.name, e.g. tests.test_calc.test_add")
    kind: Literal["failure", "error"]
    message: str
    details: str = Field(description="the start of the traceback or captured output")


class TestReport(Result):
    """A test run: what its JUnit report says, and the test command's own result."""

    __test__ = False
    report_found: bool = Field(description="false: no JUnit XML; counts are then unknown (0)")
    passed: int
    failed: int
    errors: int
    skipped: int
    total: int
    failures: list[TestFailure] = Field(description="failed and erroring tests, first 50")
    result: CommandResult = Field(description="the test command (a timed out one: no counts)")
    outcome: str = Field("", description=TEST_OUTCOME)
    hint: str = Field("", description=TEST_HINT)


class RunOnceResult(Result):
    sandbox_id: str = Field(description="the throwaway sandbox (deleted again)")
    result: CommandResult
    deleted: bool = Field(
        description="the sandbox is deleted (its container goes right after this answer); "
        "false: deleting failed, it is cleaned up later"
    )


__all__ = [
    "BackgroundCheck",
    "CommandResult",
    "DeployedApp",
    "FileContent",
    "FileEntry",
    "FileStream",
    "GpuInfo",
    "HostInfo",
    "HostKeyInfo",
    "PreviewInfo",
    "PreviewLink",
    "Result",
    "RunOnceResult",
    "SandboxInfo",
    "TestFailure",
    "TestReport",
    "UploadFile",
    "UploadResult",
]
