"""Where Docker hosts keep snapshots: a directory per snapshot on this machine.

Under SANDHUB_SNAPSHOT_DIR (0700; everything in it 0600, root's where the platform runs as
root: no other user of the machine reads a tenant's files):

    <snapshot id>/meta.json       its labels (managed, instance, snapshot id), the host that
                                  took it, the workspace's form and disk size, for
                                  reconciliation and for checks before a restore
    <snapshot id>/workspace.img   a copy of the sandbox's disk image (a local engine with
                                  sandbox disks: disk.py), sparse and shared where it can be
    <snapshot id>/workspace.tar   or a tar of /workspace (an engine without: a remote one)
    <snapshot id>/home.tar        a tar of /home/sandbox

A snapshot is made in `<id>.partial/` and renamed into place once whole, so a directory
without that suffix is always complete; one left half made (a process killed meanwhile) is
an orphan for reconciliation like any other.

Moving one to another host is `tar -cS` of its files here and `tar -x` there (GNU tar keeps
the image's holes: a 5 GB disk holding 1 GB moves 1 GB), each a subprocess fed and read 64
KiB at a time, so the platform holds a chunk at a time whatever the size.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from hosts.backends.base import (
    LABEL_INSTANCE,
    LABEL_SNAPSHOT,
    BackendError,
    ManagedResource,
    SnapshotTaken,
)
from hosts.backends.docker.sparsecopy import copy_image

CHUNK = 64 * 1024
WORKSPACE_IMAGE, WORKSPACE_TAR, HOME_TAR, META = (
    "workspace.img",
    "workspace.tar",
    "home.tar",
    "meta.json",
)
DATA_FILES = (WORKSPACE_IMAGE, WORKSPACE_TAR, HOME_TAR)
_ID = re.compile(r"^snap_[a-z0-9]{6,32}$")
_COPY_TIMEOUT = 3600.0  # seconds: a copy of a disk of many GB on a slow disk


def snapshot_dir() -> Path:
    return Path(settings.SANDHUB_SNAPSHOT_DIR)


def check_id(snapshot_id: object) -> str:
    """The id when it is a snapshot's (it names a directory here), else BackendError."""
    if not isinstance(snapshot_id, str) or not _ID.match(snapshot_id):
        raise BackendError(f"not a snapshot id: {str(snapshot_id)[:40]!r}")
    return snapshot_id


class Store:
    """The snapshot directories of this machine, for one host (its id is in their meta)."""

    def __init__(self, host_id: int | None) -> None:
        self.host_id = host_id

    # --- making one ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def making(self, snapshot_id: str, labels: dict[str, str]) -> Iterator[Path]:
        """A private directory to fill with the snapshot's files; renamed into place (with its
        meta) when the block ends well, removed when it does not."""
        final = self.path(snapshot_id)
        partial = final.with_name(final.name + ".partial")
        with _host_errors(f"making snapshot {snapshot_id}"):
            snapshot_dir().mkdir(mode=0o700, parents=True, exist_ok=True)
            if final.exists():
                raise BackendError(f"snapshot {snapshot_id} already exists")
            shutil.rmtree(partial, ignore_errors=True)  # what a killed attempt left
            partial.mkdir(mode=0o700)
        record = {"labels": labels, "host": self.host_id}
        try:
            # Labelled from the start: what a killed attempt leaves is found as this
            # deployment's by reconciliation.
            _write_private(partial / META, json.dumps(record).encode())
            yield partial
            with _host_errors(f"making snapshot {snapshot_id}"):
                _write_private(partial / META, json.dumps({**record, **_form(partial)}).encode())
                partial.rename(final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise

    def taken(self, snapshot_id: str) -> SnapshotTaken:
        meta = self.meta(snapshot_id)
        state = {"snapshot_id": snapshot_id, "workspace": meta.get("workspace", "")}
        if meta.get("disk_mb"):
            state["disk_mb"] = meta["disk_mb"]
        return SnapshotTaken(state=state, size_bytes=self.size(snapshot_id))

    # --- reading one ---------------------------------------------------------------------------
    def path(self, snapshot_id: str) -> Path:
        return snapshot_dir() / check_id(snapshot_id)

    def file(self, snapshot_state: dict[str, Any], name: str) -> Path | None:
        """One of the snapshot's files, None when it has none of that name; BackendError when
        the snapshot itself is gone."""
        directory = self.path(snapshot_state.get("snapshot_id", ""))
        if not directory.is_dir():
            raise BackendError(f"snapshot {directory.name} is gone from this host")
        path = directory / name
        return path if path.is_file() else None

    def meta(self, snapshot_id: str) -> dict[str, Any]:
        with _host_errors(f"reading snapshot {snapshot_id}"):
            data = json.loads((self.path(snapshot_id) / META).read_text())
        return data if isinstance(data, dict) else {}

    def size(self, snapshot_id: str) -> int:
        """Bytes its files take on the disk (blocks, so holes cost nothing)."""
        with _host_errors(f"measuring snapshot {snapshot_id}"):
            return sum(p.stat().st_blocks * 512 for p in self.path(snapshot_id).iterdir())

    # --- removing one --------------------------------------------------------------------------
    def delete(self, snapshot_state: dict[str, Any]) -> None:
        directory = self.path(snapshot_state.get("snapshot_id", ""))
        with _host_errors(f"removing snapshot {directory.name}"):
            for path in (directory, directory.with_name(directory.name + ".partial")):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)

    # --- moving one between hosts ------------------------------------------------------------
    def export(self, snapshot_state: dict[str, Any]) -> Iterator[bytes]:
        """tar -cS of the snapshot's data files, streamed; close() it when done."""
        directory = self.path(snapshot_state.get("snapshot_id", ""))
        names = [name for name in DATA_FILES if (directory / name).is_file()]
        if not names:
            raise BackendError(f"snapshot {directory.name} is gone from this host")
        argv = ["tar", "-c", "-S", "-f", "-", "-C", str(directory), "--", *names]
        return _tar_out(argv, f"exporting snapshot {directory.name}")

    def import_into(self, directory: Path, chunks: Iterable[bytes]) -> None:
        """Unpack an export() stream into `directory` (made by `making`): only its data files,
        each a regular file, or BackendError."""
        argv = ["tar", "-x", "-f", "-", "-C", str(directory), "--no-same-owner"]
        _tar_in(argv, chunks, f"importing a snapshot into {directory.name}")
        found = sorted(name for name in os.listdir(directory) if name != META)
        unexpected = [n for n in found if n not in DATA_FILES or not (directory / n).is_file()]
        if unexpected or not found:
            raise BackendError(f"not a snapshot's files: {unexpected or 'nothing'}")
        for name in found:
            os.chmod(directory / name, 0o600)

    # --- reconciliation ------------------------------------------------------------------------
    def managed(self) -> list[ManagedResource]:
        """This host's snapshots here, and what a killed attempt left (`.partial`)."""
        if not snapshot_dir().is_dir():
            return []
        found = []
        for entry in sorted(snapshot_dir().iterdir()):
            snapshot_id = entry.name.removesuffix(".partial")
            if not _ID.match(snapshot_id) or not entry.is_dir() or entry.is_symlink():
                continue
            try:
                created = entry.stat().st_mtime
                meta = json.loads((entry / META).read_text())
            except (OSError, ValueError):
                meta = {}
            if meta.get("host", self.host_id) != self.host_id:
                continue  # another host's (two host rows for one engine: each lists its own)
            labels = meta.get("labels") or {}
            found.append(
                ManagedResource(
                    kind="snapshot",
                    label_id=labels.get(LABEL_SNAPSHOT, snapshot_id),
                    name=str(entry),
                    created_at=created,
                    instance=labels.get(LABEL_INSTANCE, ""),
                    state={"snapshot_id": snapshot_id},
                )
            )
        return found


def _form(directory: Path) -> dict[str, Any]:
    """How the snapshot in `directory` holds the workspace: a disk image (of disk_mb MB) or
    a tar of its files."""
    image = directory / WORKSPACE_IMAGE
    if image.is_file():
        return {"workspace": "image", "disk_mb": image.stat().st_size // (1024 * 1024)}
    return {"workspace": "tar"}


def copy_sparse(source: Path, target: Path) -> None:
    """A private copy that keeps holes and shares blocks where the filesystem can (reflink):
    about the cost of the bytes really written, whatever the file's size, and on its way to
    the disk as it is made (sparsecopy.py)."""
    try:
        copy_image(source, target)
    except OSError as exc:
        raise BackendError(f"copying {source.name}: {exc.strerror or exc}") from exc


def write_stream(path: Path, chunks: Iterable[bytes]) -> None:
    """A private file holding the chunks (a tar read out of a sandbox), written as they come."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def _tar_out(argv: list[str], doing: str) -> Iterator[bytes]:
    """A tar's stdout in chunks; its failure raised at the end; close() kills the tar."""
    return _ProcessOutput(argv, doing)


class _ProcessOutput(Iterator[bytes]):
    """A subprocess's stdout, CHUNK bytes at a time; BackendError at the end if it failed.
    close() (or the end) leaves no process behind, read to its end or not."""

    def __init__(self, argv: list[str], doing: str) -> None:
        self._doing = doing
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the stream
        try:
            self._process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._errors)
        except OSError as exc:
            self._errors.close()
            raise BackendError(f"{doing}: {exc}") from exc

    def __next__(self) -> bytes:
        stdout = self._process.stdout
        if stdout is None or stdout.closed:
            raise StopIteration
        try:
            chunk = stdout.read(CHUNK)
            if chunk:
                return chunk
            code = self._process.wait(timeout=_COPY_TIMEOUT)
            if code != 0:
                raise BackendError(f"{self._doing}: tar exited with {code}: {_said(self._errors)}")
        except BaseException:
            self.close()
            raise
        self.close()
        raise StopIteration

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._errors.close()


def _tar_in(argv: list[str], chunks: Iterable[bytes], doing: str) -> None:
    """Feed the chunks to a tar's stdin one at a time; BackendError with what it said if it
    fails (or stops reading)."""
    with tempfile.TemporaryFile() as errors:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=errors)
        except OSError as exc:
            raise BackendError(f"{doing}: {exc}") from exc
        assert process.stdin is not None
        try:
            try:
                for chunk in chunks:
                    process.stdin.write(chunk)
            except BrokenPipeError:
                pass  # it stopped reading: its exit code and message say why
            finally:
                with contextlib.suppress(BrokenPipeError):
                    process.stdin.close()
            code = process.wait(timeout=_COPY_TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        if code != 0:
            raise BackendError(f"{doing}: tar exited with {code}: {_said(errors)}")


def _said(errors: IO[bytes]) -> str:
    errors.seek(0)
    return errors.read(2000).decode("utf-8", "replace").strip() or "no message"


@contextlib.contextmanager
def _host_errors(what: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise BackendError(f"{what} under {snapshot_dir()}: {exc}") from exc
