"""A /workspace of fixed size: a loop-mounted ext4 image file per sandbox, on a local engine.

A full /workspace must stop the sandbox ("No space left on device"), not fill the host's disk
(which also holds the database). Under SANDHUB_DISK_DIR (default var/disks, mode 0700; the
images and their metadata 0600: no other user of the machine reads a workspace):

    <volume>.img    a sparse file of disk_mb MB holding ext4: it costs the host only what
                    the sandbox writes, and never more than disk_mb
    <volume>.json   its labels (sandbox or pool id, deployment) and size, for reconciliation
    <volume>/       where it is mounted; the volume binds <volume>/workspace
    .lock           flock: mounting, unmounting and removing are serialised across processes

Docker 20.10's local volume driver cannot mount an image file itself (`o=loop` reaches the
kernel as a mount option and is refused), so the platform mounts it (`mount -o loop` takes a
loop device that is freed on unmount) and the sandbox's named volume binds a directory inside
it. If the image is not mounted (after a reboot, until the next probe mounts it again), that
directory does not exist and the container does not start, rather than writing to the host's
disk without a limit.

The filesystem: no blocks reserved for root (-m 0: the sandbox user is not root); the sandbox
user owns the directory it sees; mounted nosuid,nodev; `discard`, so deleting a file gives its
blocks back to the host; `noinit_itable`, so the kernel does not zero the inode tables of a
fresh image in the background (the holes of a sparse file read as zeros already).

A remote engine (or the host option disk_limit=false) gets a plain named volume: no limit,
said so in the probe's details (docs/security.md).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from hosts.backends.base import LABEL_INSTANCE, LABEL_POOL, BackendError, ManagedResource
from hosts.backends.docker import local
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import LABEL_SANDBOX, SANDBOX_GID, SANDBOX_UID
from hosts.backends.docker.snapshot_store import copy_sparse

logger = logging.getLogger(__name__)

DEFAULT_DISK_MB = 5120  # a spec without disk_mb (a warm-pool member); the team quota's default
_MOUNT_OPTIONS = "loop,nosuid,nodev,discard,noinit_itable"
_MKFS_EXTENDED = f"lazy_itable_init=1,lazy_journal_init=1,root_owner={SANDBOX_UID}:{SANDBOX_GID}"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def disk_dir() -> Path:
    return Path(settings.SANDHUB_DISK_DIR)


class Disks:
    """Loop-mounted filesystems for sandbox volumes on this machine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def enabled(self) -> bool:
        host = self.engine.host
        return local.is_local(host) and bool(host.options.get("disk_limit", True))

    # --- lifecycle ---------------------------------------------------------------------------
    def create(
        self,
        name: str,
        size_mb: int,
        labels: dict[str, str],
        source: Path | None = None,
        move: bool = False,
    ) -> dict[str, str]:
        """Make and mount the filesystem (a copy of the image `source`, a snapshot's, when
        given; with `move`, that image itself, renamed, where it is on this filesystem); the
        volume driver options that bind it.

        On failure nothing of it is left.
        """
        if not isinstance(size_mb, int) or size_mb < 16:
            raise BackendError(f"disk size must be a whole number of MB, at least 16: {size_mb!r}")
        paths = _Paths(name)
        with _host_errors(f"making the disk {name}"), self._locked():
            if paths.image.exists():
                raise BackendError(f"disk {paths.image} already exists")
            try:
                self._make(paths, size_mb, labels, source, move)
            except BaseException:
                with contextlib.suppress(Exception):
                    self._remove(paths)
                raise
        return self.bind_options(name)

    def bind_options(self, name: str) -> dict[str, str]:
        """The volume driver options that bind the disk's workspace (known before it is
        made: the engine reads the directory only when a container starts)."""
        return {"type": "none", "o": "bind", "device": str(_Paths(name).workspace)}

    def _make(
        self,
        paths: _Paths,
        size_mb: int,
        labels: dict[str, str],
        source: Path | None,
        move: bool = False,
    ) -> None:
        if source is not None:  # a snapshot's filesystem, its workspace directory in it
            if not (move and _moved(source, paths.image)):
                copy_sparse(source, paths.image)
        else:
            descriptor = os.open(paths.image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(descriptor, size_mb * 1024 * 1024)  # sparse: no block written yet
            finally:
                os.close(descriptor)
            local.run(
                ["mkfs.ext4", "-q", "-F", "-m", "0", "-E", _MKFS_EXTENDED, str(paths.image)],
                f"making the filesystem of {paths.image.name}",
            )
        # Like the image, the owner's alone, whatever the process's umask.
        meta = os.open(paths.meta, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(meta, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"labels": labels, "disk_mb": size_mb}))
        paths.mountpoint.mkdir(mode=0o700, exist_ok=True)
        self._mount(paths)
        paths.workspace.mkdir(mode=0o755, exist_ok=source is not None)
        os.chown(paths.workspace, SANDBOX_UID, SANDBOX_GID)

    def _mount(self, paths: _Paths) -> None:
        local.run(
            ["mount", "-t", "ext4", "-o", _MOUNT_OPTIONS, str(paths.image), str(paths.mountpoint)],
            f"mounting the disk {paths.image.name}",
        )

    def remove(self, name: str) -> None:
        """Unmount and delete the sandbox's filesystem; a missing one is fine."""
        paths = _Paths(name)
        if not any(p.exists() for p in (paths.image, paths.meta, paths.mountpoint)):
            return  # the usual case on a host without disks: no lock, no directory made
        with _host_errors(f"removing the disk {name}"), self._locked():
            self._remove(paths)

    def _remove(self, paths: _Paths) -> None:
        if _mounted(paths.mountpoint):
            self._unmount(paths.mountpoint)
        for path in (paths.image, paths.meta):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(FileNotFoundError):
            paths.mountpoint.rmdir()

    def _unmount(self, mountpoint: Path) -> None:
        # Right after the container and the volume went, the engine may hold the mount a
        # moment longer; then detach it lazily: the loop device goes with the last user.
        for _ in range(20):
            with contextlib.suppress(BackendError):
                local.run(["umount", str(mountpoint)], f"unmounting {mountpoint.name}")
                return
            time.sleep(0.1)
        logger.warning("%s still busy after 2 s: detaching it lazily", mountpoint)
        local.run(["umount", "-l", str(mountpoint)], f"unmounting {mountpoint.name}")

    def ensure_mounted(self, name: str) -> None:
        """Mount the sandbox's disk if it is not (a stopped sandbox starting after a reboot);
        BackendError if its image is gone: its container must not start without it."""
        paths = _Paths(name)
        with _host_errors(f"mounting the disk {name}"), self._locked():
            if not paths.image.exists():
                raise BackendError(f"the disk of {name} ({paths.image}) is gone")
            if not _mounted(paths.mountpoint):
                paths.mountpoint.mkdir(mode=0o700, exist_ok=True)
                self._mount(paths)

    @contextlib.contextmanager
    def frozen(self, name: str) -> Iterator[Path]:
        """The disk's image file while its filesystem is frozen (fsfreeze: what was written
        is flushed to the image, nothing more is written until the block ends)."""
        paths = _Paths(name)
        if not _mounted(paths.mountpoint):
            raise BackendError(f"the disk {name} is not mounted")
        local.run(["fsfreeze", "-f", str(paths.mountpoint)], f"freezing the disk {name}")
        try:
            yield paths.image
        finally:
            local.run(["fsfreeze", "-u", str(paths.mountpoint)], f"thawing the disk {name}")

    def ensure_all(self) -> int:
        """Mount every disk that is not (after a reboot); how many disks there are."""
        if not self.enabled or not disk_dir().is_dir():
            return 0
        count = 0
        with _host_errors("mounting the disks"), self._locked():
            for meta in sorted(disk_dir().glob("*.json")):
                paths = _Paths(meta.stem)
                if not paths.image.exists():
                    continue
                count += 1
                if not _mounted(paths.mountpoint):
                    paths.mountpoint.mkdir(mode=0o700, exist_ok=True)
                    self._mount(paths)
        return count

    # --- reconciliation ----------------------------------------------------------------------
    def managed(self) -> list[ManagedResource]:
        if not local.is_local(self.engine.host) or not disk_dir().is_dir():
            return []
        found = []
        for meta in sorted(disk_dir().glob("*.json")):
            try:
                labels = json.loads(meta.read_text()).get("labels") or {}
                created = meta.stat().st_mtime
            except (OSError, ValueError, AttributeError):
                continue  # removed meanwhile, or half written: the next run sees it
            found.append(
                ManagedResource(
                    kind="disk",
                    label_id=labels.get(LABEL_SANDBOX, ""),
                    name=meta.stem,
                    created_at=created,
                    instance=labels.get(LABEL_INSTANCE, ""),
                    pool=labels.get(LABEL_POOL) == "1",
                    state={"disk": meta.stem},
                )
            )
        return found

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        directory = disk_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        with local.file_lock(str(directory / ".lock")):
            yield


@contextlib.contextmanager
def _host_errors(what: str) -> Iterator[None]:
    """Files and directories of this machine that fail: a BackendError that says so (not,
    as the engine's error mapping would say of an OSError, an unreachable engine)."""
    try:
        yield
    except OSError as exc:
        raise BackendError(f"{what} under {disk_dir()}: {exc}") from exc


class _Paths:
    def __init__(self, name: str) -> None:
        # The name comes from backend state; it must stay a plain file name in disk_dir.
        if not _SAFE_NAME.match(name):
            raise BackendError(f"not a disk name: {name!r}")
        base = disk_dir()
        self.image = base / f"{name}.img"
        self.meta = base / f"{name}.json"
        self.mountpoint = base / name
        self.workspace = self.mountpoint / "workspace"


def _mounted(path: Path) -> bool:
    """Whether something is mounted at `path` (read from this process's mount table)."""
    target = str(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split()
            # Field 5 is the mount point, with spaces and the like escaped as octal.
            if len(fields) > 4 and fields[4].encode().decode("unicode_escape") == target:
                return True
    return False


def _moved(source: Path, target: Path) -> bool:
    """`source` renamed to `target` (no byte copied); False where they are on different
    filesystems (then the caller copies)."""
    try:
        os.rename(source, target)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            return False
        raise BackendError(f"moving {source.name} into {target.name}: {exc}") from exc
    os.chmod(target, 0o600)
    return True
