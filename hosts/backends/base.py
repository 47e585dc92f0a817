"""The one interface every sandbox backend implements (Docker, SSH, and whatever comes next).

Services talk to backends only through this class. A backend instance is bound to one Host;
everything it needs to find a sandbox again lives in the JSON `state` it returns from
`provision`, saved on the Sandbox row (as JupyterHub saves a Spawner's state).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hosts.models import Host

# Called with ("stdout" | "stderr", chunk) while a command runs, for live output.
OutputCallback = Callable[[str, bytes], None]


class BackendError(Exception):
    """The host could not do what was asked (unreachable, engine error, ...)."""


class SandboxGone(BackendError):
    """The sandbox's container or directory no longer exists on the host."""


class Unsupported(BackendError):
    pass


@dataclass(frozen=True)
class SandboxSpec:
    sandbox_id: str
    image_reference: str
    cpus: float
    memory_mb: int
    pids_limit: int
    network: bool
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class ExecResult:
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_bytes: int  # total produced, including what was cut
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration_seconds: float


@dataclass(frozen=True)
class FileEntry:
    name: str
    path: str
    kind: str  # "file" | "dir" | "link" | "other"
    size: int
    mtime: float
    mode: str


@dataclass(frozen=True)
class ProbeResult:
    healthy: bool
    cpu_percent: float | None = None
    memory_percent: float | None = None
    gpu_percent: float | None = None
    sandboxes_running: int = 0
    error: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class HeadTailBuffer:
    """Keeps the first and last `cap // 2` bytes of a stream and counts the rest.

    Memory stays bounded by `cap` however much is written; what is cut is in the middle,
    where it matters least for reading a failure.
    """

    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 0)
        self._head = bytearray()
        self._tail = bytearray()
        self._head_cap = self.cap - self.cap // 2
        self._tail_cap = self.cap // 2
        self.total = 0

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self._tail_cap:
            self._tail += chunk
            if len(self._tail) > self._tail_cap:
                del self._tail[: len(self._tail) - self._tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def getvalue(self, marker: bool = True) -> bytes:
        if not self.truncated:
            return bytes(self._head + self._tail)
        cut = self.total - len(self._head) - len(self._tail)
        middle = f"\n... [{cut} bytes cut] ...\n".encode() if marker else b""
        return bytes(self._head) + middle + bytes(self._tail)


class SandboxBackend(abc.ABC):
    """Lifecycle, commands and files of sandboxes on one host."""

    kind: str = ""

    def __init__(self, host: Host) -> None:
        self.host = host

    # --- lifecycle ---------------------------------------------------------------------------
    @abc.abstractmethod
    def provision(self, spec: SandboxSpec) -> dict[str, Any]:
        """Create and start the sandbox; return the state needed to find it again."""

    @abc.abstractmethod
    def destroy(self, state: dict[str, Any]) -> None:
        """Remove the sandbox and everything it stored. Idempotent: a missing one is fine."""

    @abc.abstractmethod
    def status(self, state: dict[str, Any]) -> str:
        """ "running", "stopped" or "missing"."""

    # --- commands ----------------------------------------------------------------------------
    @abc.abstractmethod
    def exec(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        timeout: float,
        output_cap: int,
        on_output: OutputCallback | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run argv; kill it inside the sandbox after `timeout` seconds (timed_out=True)."""

    def start_background(
        self, state: dict[str, Any], argv: list[str], *, cwd: str, env: dict[str, str], job_id: str
    ) -> dict[str, Any]:
        raise Unsupported(f"{self.kind} backend has no background commands yet")

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> dict[str, Any]:
        raise Unsupported(f"{self.kind} backend has no background commands yet")

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        raise Unsupported(f"{self.kind} backend has no background commands yet")

    # --- files -------------------------------------------------------------------------------
    @abc.abstractmethod
    def put_files(self, state: dict[str, Any], dest_dir: str, tar_stream: bytes) -> None:
        """Unpack a tar archive into dest_dir (absolute, inside the sandbox)."""

    @abc.abstractmethod
    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar stream of `path` (file or directory), in chunks, never whole in memory."""

    @abc.abstractmethod
    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        """Entries of a directory, or the one entry of a file."""

    # --- host --------------------------------------------------------------------------------
    @abc.abstractmethod
    def probe(self) -> ProbeResult:
        """Health and load of the host."""

    def list_sandbox_ids(self) -> Iterable[str]:
        """Sandbox ids the host carries (for reconciliation)."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release connections held for this host."""
