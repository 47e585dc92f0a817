"""The one interface every sandbox backend implements (Docker, SSH, and whatever comes next).

Services talk to backends only through this class. A backend instance is bound to one Host;
everything it needs to find a sandbox again lives in the JSON `state` it returns from
`provision`, saved on the Sandbox row (as JupyterHub saves a Spawner's state).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from hosts.backends.errors import (  # noqa: F401 - the interface's errors, named here too
    BackendError,
    HostKeyRejected,
    PortClosed,
    SandboxGone,
    TerminalGone,
    Unsupported,
)
from hosts.backends.interactive import InteractiveMethods, TerminalStream  # noqa: F401
from hosts.backends.stdin import StdinClosed, StdinPipe  # noqa: F401 - exec's streamed input
from hosts.backends.types import (  # noqa: F401 - the interface's values, named here too
    CONSUMED_BY_ONE,
    LABEL_INSTANCE,
    LABEL_POOL,
    LABEL_SNAPSHOT,
    EgressSpec,
    ExecResult,
    FileEntry,
    HeadTailBuffer,
    JobStatus,
    ManagedResource,
    ManifestEntry,
    ManifestPage,
    OutputCallback,
    ProbeResult,
    SandboxSpec,
    SnapshotTaken,
    TerminalInfo,
    UsageSample,
)

if TYPE_CHECKING:
    from hosts.models import Host


@dataclass(frozen=True)
class HostKey:
    """A host's public key as an admin confirms it: its type and OpenSSH SHA256 fingerprint."""

    key_type: str
    fingerprint: str


class PortStream(abc.ABC):
    """A byte stream to 127.0.0.1:PORT inside a sandbox (previews), opened through the
    backend's own transport, so it works for a sandbox without network.

    One thread may read while another writes. Memory is bounded both ways: `write` blocks
    while the far side has not taken what was sent (flow control), and the backend buffers at
    most a window of unread inbound bytes. Errors after opening are BackendError.
    """

    @abc.abstractmethod
    def read(self, max_bytes: int = 65536, timeout: float | None = None) -> bytes:
        """Up to max_bytes as soon as any are there; b"" once the app closed its side.
        Raises TimeoutError when nothing came within `timeout` seconds (None: wait)."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Send all of data to the app, blocking while the window is full."""

    @abc.abstractmethod
    def close_write(self) -> None:
        """No more data to the app (half-close: it reads end of file)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close both directions and free the channel; idempotent, never raises."""

    def __enter__(self) -> PortStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SandboxBackend(InteractiveMethods, abc.ABC):
    """Lifecycle, commands and files of sandboxes on one host (terminals, shell sessions and
    usage samples: interactive.py)."""

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
        """ "running", "paused", "stopped" or "missing"."""

    # Pause, resume, stop and start keep the sandbox on its host (its state stays valid). A
    # kind that cannot do one raises Unsupported with a message an agent or a person can act
    # on; the defaults say the kind has none. Each is idempotent (pausing a paused sandbox
    # is fine) and raises SandboxGone when the sandbox is no longer there.
    def pause(self, state: dict[str, Any]) -> None:
        """Freeze every process of the sandbox where it is, memory kept (Docker: the
        engine's pause, the cgroup freezer; SSH: the sandbox's own cgroup frozen). Calls
        through its agent wait until resume: the caller makes sure none is in flight."""
        raise Unsupported(
            f"sandboxes on {self.kind} hosts cannot be paused; stop or delete it instead"
        )

    def resume(self, state: dict[str, Any]) -> None:
        """Thaw a paused sandbox: its processes go on where they were."""
        raise Unsupported(f"sandboxes on {self.kind} hosts cannot be paused or resumed")

    def stop(self, state: dict[str, Any]) -> None:
        """End every process of the sandbox (a paused one too), keeping its files (the
        workspace and, on Docker, the container's writable layer) and its disk. The
        sandbox agent goes with them: the next call after start() starts a new one."""
        raise Unsupported(
            f"sandboxes on {self.kind} hosts cannot be stopped and started again; delete it instead"
        )

    def start(self, state: dict[str, Any]) -> None:
        """Start a stopped sandbox again with what it had (files, disk, network and its
        fences, limits); its processes start afresh. Returns once commands can run."""
        raise Unsupported(f"sandboxes on {self.kind} hosts cannot be started again")

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
        stdin: bytes | StdinPipe | None = None,
        once: bool = False,
        marker: str | None = None,
    ) -> ExecResult:
        """Run argv; kill it inside the sandbox after `timeout` seconds (timed_out=True).

        once: the sandbox runs only this command before it goes (run_once), so a backend may
        skip set-up that pays off only over many commands (Docker: starting the agent).
        marker: the name its processes carry (letters and digits, unique), so kill_command can end
        it from any process while it runs; a backend picks one when not given.
        stdin: its standard input, whole (bytes), or as another thread writes it (a StdinPipe,
        until its close(); Unsupported where the backend cannot stream input)."""

    def kill_command(self, state: dict[str, Any], marker: str) -> None:
        """SIGKILL every process of the command started with `marker` (exec), if it still
        runs. Its exec then returns as killed."""
        raise Unsupported(f"{self.kind} backend cannot kill a running command")

    # Background jobs run detached on the host (own session, output to a log file there, exit
    # code written to a file when they end), so they outlive the caller, the web process and
    # the worker. The job dict start_background returns is JSON, stored by the caller and
    # handed back to poll/cancel: it must be all they need, in any process, at any later time.
    def start_background(
        self,
        state: dict[str, Any],
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        job_id: str,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Start argv detached; kill it on the host after `timeout` seconds (exit code 124).

        job_id ([A-Za-z0-9_-], unique within the sandbox) names the job's log directory and
        marks its processes. A cwd that does not exist is an ordinary failed job (126).
        """
        raise Unsupported(f"{self.kind} backend has no background commands yet")

    def poll_background(
        self, state: dict[str, Any], job: dict[str, Any], tail_bytes: int
    ) -> JobStatus:
        """Running or not, exit code, and the last tail_bytes of the job's combined log."""
        raise Unsupported(f"{self.kind} backend has no background commands yet")

    def cancel_background(self, state: dict[str, Any], job: dict[str, Any]) -> None:
        """Kill every process of the job (SIGTERM, then SIGKILL); idempotent."""
        raise Unsupported(f"{self.kind} backend has no background commands yet")

    # --- files -------------------------------------------------------------------------------
    @abc.abstractmethod
    def put_files(
        self, state: dict[str, Any], dest_dir: str, tar_stream: bytes | IO[bytes]
    ) -> None:
        """Unpack a tar archive (bytes, or a file object read to its end) into dest_dir
        (absolute, inside the sandbox) as the sandbox user, never following or replacing a
        symbolic link. Raises NotADirectoryError for a link or file where a directory goes,
        FileExistsError for a file over a directory, PermissionError where the sandbox user
        may not write."""

    @abc.abstractmethod
    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar stream of `path` (file or directory), in chunks, never whole in memory, read
        as the sandbox user: what it cannot read, this cannot either. FileNotFoundError and
        PermissionError come from the call itself; the caller must close() the iterator (a
        stream left open holds the sandbox's engine connection)."""

    @abc.abstractmethod
    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        """Entries of a directory, or the one entry of a file."""

    # --- sync (a tree's manifest, deletions and a download of chosen entries) ---------------
    def manifest(
        self, state: dict[str, Any], root: str, *, after: str | None, limit: int
    ) -> ManifestPage:
        """Files, directories and links under the directory `root` (links not followed), at
        most `limit` with a relative path > `after`, sorted. A missing root: exists False;
        NotADirectoryError when it is a file or a link; names that are not UTF-8 are left out
        (they cannot travel in JSON)."""
        raise Unsupported(f"{self.kind} backend cannot list a tree for sync")

    def delete_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> int:
        """Remove the entries (directories with what they hold) at `paths`, relative to root
        (checked by the caller: normalized, no `..`), never anything whose parent resolves
        outside root; how many existed and were removed."""
        raise Unsupported(f"{self.kind} backend cannot delete for sync")

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        """A tar stream (pax: modes, nanosecond mtimes) of exactly the entries at `paths`
        (relative to root, directories without their content), named by those paths, read as
        the sandbox user; as get_files: close() it, errors at its end."""
        raise Unsupported(f"{self.kind} backend cannot download entries for sync")

    # --- ports -------------------------------------------------------------------------------
    def open_port(self, state: dict[str, Any], port: int, timeout: float = 5.0) -> PortStream:
        """A stream to 127.0.0.1:`port` inside the sandbox. Raises PortClosed when nothing
        (of the sandbox's own) listens there, SandboxGone, or BackendError."""
        raise Unsupported(f"{self.kind} backend cannot open ports in a sandbox")

    # --- host --------------------------------------------------------------------------------
    @abc.abstractmethod
    def probe(self) -> ProbeResult:
        """Health and load of the host."""

    def list_sandbox_ids(self) -> Iterable[str]:
        """Sandbox ids the host carries (for reconciliation)."""
        return []

    def list_managed(self) -> list[ManagedResource]:
        """Every container and volume Sandhub made on the host, with its age (reconciliation).

        A backend without it gets no orphan removal and no "lost" detection by listing.
        """
        raise Unsupported(f"{self.kind} backend cannot list what it made")

    def probe_gpu(self) -> float | None:
        """GPU use in percent where the host can tell (e.g. nvidia-smi), else None."""
        return None

    def fetch_host_key(self) -> HostKey:
        """The key the host presents, read without logging in (for an admin to confirm)."""
        raise Unsupported(f"a {self.kind} host has no host key to pin")

    # --- snapshots (optional: the defaults mean "no snapshots on this kind of host") --------
    # A snapshot's bytes stay on the host that took it, found again by the state these
    # return; `provision` starts a sandbox from one when its spec names that state
    # (SandboxSpec.snapshot). Moving one to another host of the kind is a tar stream in
    # bounded memory: export_snapshot there, import_snapshot here.
    def snapshot(
        self, state: dict[str, Any], snapshot_id: str, labels: dict[str, str]
    ) -> SnapshotTaken:
        """Copy the sandbox's files (what a kind keeps: its docstring says) under
        `snapshot_id`, labelled with `labels` (reconciliation finds them by their instance
        and LABEL_SNAPSHOT), consistently: the sandbox's writers are frozen while the copy
        is taken, and run on afterwards. On failure nothing of it is left."""
        raise Unsupported(f"{self.kind} hosts cannot take snapshots")

    def delete_snapshot(self, snapshot_state: dict[str, Any]) -> None:
        """Remove a snapshot's bytes. Idempotent: a missing one is fine."""
        raise Unsupported(f"{self.kind} hosts cannot take snapshots")

    def export_snapshot(self, snapshot_state: dict[str, Any]) -> Iterator[bytes]:
        """The snapshot as a tar stream, in chunks (never whole in memory), for
        import_snapshot on another host of the kind; the caller must close() it. A failure
        of the host's own tar is raised at the stream's end."""
        raise Unsupported(f"{self.kind} hosts cannot move snapshots")

    def import_snapshot(
        self, snapshot_id: str, labels: dict[str, str], chunks: Iterable[bytes]
    ) -> SnapshotTaken:
        """Store an export_snapshot stream as the snapshot `snapshot_id` of this host, read
        chunk by chunk (bounded memory). On failure nothing of it is left."""
        raise Unsupported(f"{self.kind} hosts cannot move snapshots")

    # --- warm pool (optional: the defaults mean "no pool on this kind of host") -------------
    def provision_pool_member(self, spec: SandboxSpec) -> dict[str, Any]:
        """Start a ready, unowned sandbox for the pool; spec.sandbox_id is the pool id."""
        raise Unsupported(f"{self.kind} backend has no warm pool")

    def claim_pool_member(self, state: dict[str, Any], spec: SandboxSpec) -> dict[str, Any]:
        """Make a pool member the sandbox `spec` describes (limits, name); return its state.

        Raises BackendError (the caller discards the member and provisions afresh) when the
        spec cannot be applied to a running member.
        """
        raise Unsupported(f"{self.kind} backend has no warm pool")

    def keep_agent(self, state: dict[str, Any]) -> bool:
        """Start the sandbox's agent in this process now, ahead of any call (a warm-pool
        member's, so the sandbox that claims it answers its first command at once). False
        where none runs (a kind without one, the agent turned off, no python3 in the image)."""
        return False

    def has_agent(self, state: dict[str, Any]) -> bool:
        """Whether this process holds a live agent of the sandbox (its stream open: the
        container or directory is there and running)."""
        return False

    def drop_agent(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional, as above
        """Close this process's agent of the sandbox, if any (a member gone unclaimed)."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release connections held for this host."""
