"""Snapshots of Docker sandboxes: their workspace and their home, kept on this machine
(snapshot_store.py says where and how).

What is kept, and why not a `docker commit`. A sandbox's root filesystem is read-only
(containers.py): its user can write only /workspace (a volume), /tmp and its home (tmpfs). A
commit captures the container's writable layer, which therefore stays empty (`docker diff`
lists nothing; volumes and tmpfs mounts are never part of a commit): it would store a copy
of the image and nothing of the sandbox, and moving it between hosts would move the whole
image. What holds a sandbox's work is kept instead:

- the workspace. On a local engine with sandbox disks (disk.py) a copy of the disk's image,
  taken with the sandbox's writers frozen: the container is paused (the freezer cgroup stops
  each of its processes where it is), its filesystem frozen (fsfreeze: everything written so
  far reaches the image, nothing more is written), the image copied as `cp --sparse=always
  --reflink=auto` would (holes kept, blocks shared where the filesystem can: a 5 GB disk
  holding 1 GB costs about one copy of 1 GB; sparsecopy.py), then thawed and unpaused. A
  command running meanwhile is stopped for the copy and goes on afterwards, its timeout
  counting the pause. Elsewhere (a remote engine: no disk of ours) a tar of /workspace read
  as the sandbox user, while the sandbox runs.
- the home (/home/sandbox): where `pip install --user` puts packages (~/.local) and tools keep
  their settings; a tar read as the sandbox user just before the workspace is frozen (a
  paused container runs no exec). /tmp is scratch and is not kept.

A sandbox made from a snapshot gets a disk that is a copy of the snapshot's image (the same
size), or a fresh one with the workspace tar unpacked into it; the home tar is unpacked once
it runs. Both unpack as the sandbox user inside the new sandbox, so an archive can do there
only what its user could.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hosts.backends.base import (
    BackendError,
    HeadTailBuffer,
    ManagedResource,
    SandboxSpec,
    SnapshotTaken,
)
from hosts.backends.docker.containers import Containers
from hosts.backends.docker.disk import DEFAULT_DISK_MB
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.files import Files
from hosts.backends.docker.names import WORKSPACE, container_ref, names
from hosts.backends.docker.plain import exit_code, open_exec
from hosts.backends.docker.snapshot_store import (
    HOME_TAR,
    WORKSPACE_IMAGE,
    WORKSPACE_TAR,
    Store,
    copy_sparse,
    write_stream,
)
from hosts.backends.docker.stream import Deadline
from hosts.backends.fallback.commands import INTERNAL_TIMEOUT

HOME = "/home/sandbox"
# sh -c _UNTAR sandhub-restore DIR SIZE: SIZE bytes of a tar from stdin unpacked into DIR
# (its top directory stripped: the archives are of /workspace and /home/sandbox themselves).
_UNTAR = (
    'head -c "$2" | tar -x -f - -C "$1" --strip-components=1 --no-same-owner --no-overwrite-dir'
)
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}


class Snapshots:
    """Take, restore, move and remove the snapshots of one engine's sandboxes."""

    def __init__(self, engine: Engine, containers: Containers, files: Files) -> None:
        self.engine = engine
        self.containers = containers
        self.files = files

    @property
    def store(self) -> Store:
        return Store(self.engine.host.pk)

    # --- taking one --------------------------------------------------------------------------
    def take(
        self, state: dict[str, Any], snapshot_id: str, labels: dict[str, str]
    ) -> SnapshotTaken:
        container = container_ref(state)
        disk = state.get("disk") or names(state)[1]
        on_disk = self.containers.disks.enabled and bool(state.get("disk_mb"))
        with self.store.making(snapshot_id, labels) as directory:
            write_stream(directory / HOME_TAR, self._read(state, HOME))
            if on_disk:
                with self._paused(container), self.containers.disks.frozen(disk) as image:
                    copy_sparse(image, directory / WORKSPACE_IMAGE)
            else:
                write_stream(directory / WORKSPACE_TAR, self._read(state, WORKSPACE))
        return self.store.taken(snapshot_id)

    def _read(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar of `path` as the sandbox user reads it; what it cannot read fails the
        snapshot (a snapshot that silently lacks files would be worse)."""
        try:
            stream = self.files.get_files(state, path)
        except OSError as exc:
            message = f"reading {path} for the snapshot: {exc or 'permission denied'}"
            raise BackendError(message) from exc
        try:
            yield from stream
        except OSError as exc:
            raise BackendError(f"reading {path} for the snapshot: {exc}") from exc
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    @contextlib.contextmanager
    def _paused(self, container: str) -> Iterator[None]:
        """The container's processes stopped (the engine's pause: the freezer cgroup), unless
        it is paused already (then it stays so)."""
        api = self.engine.api()
        with self.engine.errors("pausing the sandbox for its snapshot"):
            already = bool(api.inspect_container(container)["State"].get("Paused"))
            if not already:
                api.pause(container)
        try:
            yield
        finally:
            if not already:
                with self.engine.errors("unpausing the sandbox after its snapshot"):
                    api.unpause(container)

    # --- starting a sandbox from one ---------------------------------------------------------
    def disk_source(self, spec: SandboxSpec) -> Path | None:
        """The image a new sandbox's disk copies (a snapshot holding one), else None."""
        if not spec.snapshot:
            return None
        image = self.store.file(spec.snapshot, WORKSPACE_IMAGE)
        if image is None:
            return None
        snapshot_id = spec.snapshot.get("snapshot_id")
        if not self.containers.disks.enabled:
            raise BackendError(
                f"snapshot {snapshot_id} holds a workspace disk, and host {self.engine.host} "
                "has no sandbox disks (a remote engine, or disk_limit=false): start it on a "
                "host with them"
            )
        wanted = spec.snapshot.get("disk_mb")
        if (spec.disk_mb or DEFAULT_DISK_MB) != wanted:
            raise BackendError(f"a sandbox from snapshot {snapshot_id} has its {wanted} MB disk")
        return image

    def restore(self, state: dict[str, Any], snapshot_state: dict[str, Any]) -> None:
        """Unpack what the snapshot holds as tars into the new sandbox, which runs."""
        workspace = self.store.file(snapshot_state, WORKSPACE_TAR)
        if workspace is not None:
            self._untar(state, WORKSPACE, workspace)
        home = self.store.file(snapshot_state, HOME_TAR)
        if home is not None:
            self._untar(state, HOME, home)

    def _untar(self, state: dict[str, Any], directory: str, archive: Path) -> None:
        size = archive.stat().st_size
        argv = ["sh", "-c", _UNTAR, "sandhub-restore", directory, str(size)]
        exec_id, stream = open_exec(
            self.engine, container_ref(state), argv, environment=_ENV, stdin=True,
            doing="restoring a snapshot",
        )  # fmt: skip
        said = HeadTailBuffer(16 * 1024)
        try:
            with archive.open("rb") as source:
                while chunk := source.read(256 * 1024):
                    stream.timed.settimeout(INTERNAL_TIMEOUT)
                    stream.timed.sendall(chunk)
            for _, chunk in stream.frames(lambda: time.monotonic() + INTERNAL_TIMEOUT):
                said.write(chunk)
        except (Deadline, OSError) as exc:
            raise BackendError(f"restoring {directory} from the snapshot failed: {exc}") from exc
        finally:
            stream.close()
        code = exit_code(self.engine, exec_id)
        if code != 0:
            message = said.getvalue().decode("utf-8", "replace").strip()
            raise BackendError(f"restoring {directory} from the snapshot failed: {message}")

    # --- the rest ------------------------------------------------------------------------------
    def delete(self, snapshot_state: dict[str, Any]) -> None:
        self.store.delete(snapshot_state)

    def export(self, snapshot_state: dict[str, Any]) -> Iterator[bytes]:
        return self.store.export(snapshot_state)

    def import_(
        self, snapshot_id: str, labels: dict[str, str], chunks: Iterable[bytes]
    ) -> SnapshotTaken:
        store = self.store
        with store.making(snapshot_id, labels) as directory:
            store.import_into(directory, chunks)
        return store.taken(snapshot_id)

    def managed(self) -> list[ManagedResource]:
        return self.store.managed()
