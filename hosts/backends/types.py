"""The values that cross the backend interface (hosts/backends/base.py re-exports them):
a sandbox's spec, a command's result, file and manifest entries, what reconciliation and
probes see, and the head-and-tail buffer that keeps a command's output bounded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Called with ("stdout" | "stderr", chunk) while a command runs, for live output.
OutputCallback = Callable[[str, bytes], None]


@dataclass(frozen=True)
class EgressSpec:
    """A sandbox whose network goes through the platform's egress proxy (allowlist or public:
    the policy lives in the proxy; the backend routes the sandbox to it and nowhere else)."""

    mode: str  # "allowlist" | "public"
    proxy_port: int  # TCP port of the proxy on this machine (explicit and transparent)
    dns_port: int  # UDP port of the proxy's DNS server on this machine
    token: str  # the sandbox's proxy credential (Proxy-Authorization: user = sandbox id)
    ca_pem: str  # the deployment's CA certificate (PEM), to be trusted inside the sandbox


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
    # Size of /workspace in MB, enforced where the backend can (docs/security.md); None: the
    # backend's default.
    disk_mb: int | None = None
    # The host's GPU indices the sandbox gets (CUDA_VISIBLE_DEVICES); empty: none.
    gpus: tuple[int, ...] = ()
    # Start from a snapshot's files: its state as this backend's snapshot() or
    # import_snapshot() returned it (a snapshot of this host); None: empty.
    snapshot: dict[str, Any] | None = None
    # Network through the egress proxy; None: the network is off (network False).
    egress: EgressSpec | None = None


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
class ManifestEntry:
    """One entry of a tree manifest (sync): `path` relative to the manifest's root, POSIX."""

    path: str
    kind: str  # "file" | "dir" | "link" (nothing else is listed)
    size: int  # 0 for directories
    mtime: float  # seconds; from the exact decimal of the nanoseconds (as find's %T@)
    mode: int  # the 0o7777 bits
    target: str = ""  # links only


@dataclass(frozen=True)
class ManifestPage:
    """Entries of a tree with paths after a cursor, sorted by path (bytewise: UTF-8 order)."""

    exists: bool  # False: the root is missing (no entries)
    entries: list[ManifestEntry]
    next: str | None  # the cursor of the next page (the last path here), None at the end


# Labels the platform puts in SandboxSpec.labels; backends that can label what they create keep
# them, and report them back through list_managed().
LABEL_INSTANCE = "org.sandhub.instance"  # which Sandhub deployment made it (reconciliation scope)
LABEL_POOL = "org.sandhub.pool"  # "1" on warm-pool members, claimed or not
LABEL_SNAPSHOT = "org.sandhub.snapshot"  # a snapshot's id, on what holds its bytes
# In a snapshot's state (SandboxSpec.snapshot): the snapshot is a fork's own, deleted once the
# one sandbox made from it runs, so its files may be moved into that sandbox, not copied.
CONSUMED_BY_ONE = "consumed_by_one"


@dataclass(frozen=True)
class SnapshotTaken:
    """A snapshot's bytes on a host: what the backend needs to find them again (JSON, kept on
    the Snapshot row) and what they take on its disk (blocks really used, in bytes)."""

    state: dict[str, Any]
    size_bytes: int


@dataclass(frozen=True)
class ManagedResource:
    """One thing Sandhub made on a host (a container, a volume), as reconciliation sees it."""

    # "container" | "volume" | "network" | "disk" (Docker); "directory" | "user" (SSH);
    # "snapshot" (both: label_id is the snapshot's id, state what delete_snapshot() takes)
    kind: str
    label_id: str  # the sandbox or warm-pool id written on it at creation (labels never change)
    name: str
    created_at: float | None  # unix time; None when the host cannot tell
    instance: str = ""  # LABEL_INSTANCE, "" when unlabelled
    pool: bool = False
    running: bool = False
    # What destroy() needs to remove exactly this resource.
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobStatus:
    """A background job as its host sees it now (poll_background)."""

    running: bool
    exit_code: int | None  # None while running, and when the job vanished without one
    output: bytes  # the last bytes of the log (stdout and stderr interleaved)
    output_bytes: int  # the log's whole size
    cancelled: bool = False  # cancel_background was called while it ran
    # Start to end, by the host's own clock (None until it ended with an exit code).
    elapsed_seconds: float | None = None
    # Not running, no exit code, not cancelled: the job vanished (killed together with what
    # records its exit code, or the sandbox restarted under it).
    # Set when the job ended but what it left cannot be trusted (its exit file holds no exit
    # code: the sandbox can write there): the job ended with exit_code None, and this says why.
    problem: str = ""


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


@dataclass(frozen=True)
class TerminalInfo:
    """A terminal or a shell session running in a sandbox (list_terminals)."""

    terminal_id: str
    kind: str  # "terminal" (a PTY for a person) | "shell" (an agent's shell session)
    pid: int  # the holder's pid in the sandbox
    started_at: float  # unix time, by the sandbox's clock
    last_activity: float  # unix time of the last input, output or attach
    attached: int  # clients attached now


@dataclass(frozen=True)
class UsageSample:
    """What a sandbox uses at one moment, read from its own cgroup and disk (sample_usage).

    CPU is a counter: the percentage is the difference of two samples over their interval,
    against `cpu_limit` cores. None where the sandbox cannot tell (the file is missing)."""

    at: float  # unix time
    cpu_seconds: float | None  # CPU time used since the sandbox started (all its processes)
    cpu_limit: float | None  # cores
    memory_bytes: int | None  # without the page cache the kernel can drop
    memory_limit_bytes: int | None
    disk_used_bytes: int | None  # of /workspace
    disk_limit_bytes: int | None
    pids: int | None
    pids_limit: int | None
