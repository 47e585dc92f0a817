"""Files in a Docker sandbox: tar archives in and out through the engine, listings by `find`.

Uploads land in /workspace (the named volume) only: `put_archive` into a tmpfs mount reports
success but the files never show up in the container (moby#22020). Downloads from the tmpfs
mounts, which the engine cannot see either, are tarred inside the sandbox instead.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from collections.abc import Iterable, Iterator
from typing import Any

import docker.errors

from hosts.backends.base import BackendError, FileEntry, HeadTailBuffer, SandboxGone
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.exec import INTERNAL_TIMEOUT, Commands, Deadline
from hosts.backends.docker.names import SANDBOX_GID, SANDBOX_UID, WORKSPACE, container_ref

_ARCHIVE_CHUNK = 64 * 1024
_LISTING_CAP = 16 * 1024 * 1024
_MISSING_EXIT = 44  # what _LIST and _EXISTS exit with for "no such path"

# One find per listing, NUL-separated so any byte may appear in a name.
_LIST = r"""
fmt='%y\0%s\0%T@\0%m\0%f\0%p\0'
if [ -d "$1" ]; then exec find "$1" -mindepth 1 -maxdepth 1 -printf "$fmt"; fi
if [ -e "$1" ] || [ -L "$1" ]; then exec find "$1" -maxdepth 0 -printf "$fmt"; fi
echo "no such file or directory: $1" >&2; exit 44
"""
_LIST_FIELDS = 6
_KINDS = {"f": "file", "d": "dir", "l": "link"}

_EXISTS = r"""
[ -e "$1" ] || [ -L "$1" ] || exit 44
"""

# Names members after the basename of the path, as the engine's get_archive does.
_TAR = r"""
cd "$(dirname "$1")" && exec tar -cf - -- "$(basename "$1")"
"""

_MKDIR = r"""
mkdir -p -- "$1" || exit 1
[ -w "$1" ] || { echo "$1 is not writable by the sandbox user" >&2; exit 1; }
"""


class Files:
    """Uploads, downloads and listings, through the engine and through `commands`."""

    def __init__(self, engine: Engine, commands: Commands) -> None:
        self.engine = engine
        self.commands = commands

    def put_files(self, state: dict[str, Any], dest_dir: str, tar_stream: bytes) -> None:
        """Unpack into dest_dir, which must be /workspace or below.

        Everything else writable in a sandbox is tmpfs, where the engine's archive upload
        reports success but the files never appear (moby#22020): refuse rather than lose them.
        """
        container = container_ref(state)
        dest_dir = posixpath.normpath(dest_dir)
        if dest_dir != WORKSPACE and not dest_dir.startswith(WORKSPACE + "/"):
            raise BackendError(
                f"files can only be uploaded under {WORKSPACE}, not into {dest_dir} "
                "(the docker engine cannot write into the sandbox's tmpfs mounts)"
            )
        archive = _owned_by_sandbox(tar_stream)
        if dest_dir != WORKSPACE:  # the volume's root always exists; skip the round trip
            code, _, message = self.commands.internal(state, _MKDIR, dest_dir)
            if code != 0:
                raise BackendError(f"cannot create directory {dest_dir}: {message}")
        with self.engine.errors(f"writing files into {dest_dir}"):
            try:
                ok = self.engine.api().put_archive(container, dest_dir, archive)
            except docker.errors.NotFound as exc:
                raise SandboxGone(f"sandbox container {container} no longer exists") from exc
        if not ok:
            raise BackendError(f"the engine refused the archive for {dest_dir}")

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar of path, requested right away so a missing path raises here, not mid-stream.

        The engine cannot see into tmpfs mounts (/tmp, /home/sandbox) and answers "not found"
        for them; when the path does exist inside, tar runs in the sandbox instead.
        """
        container = container_ref(state)
        api = self.engine.api()
        invisible = False
        with self.engine.errors(f"reading {path}"):
            try:
                chunks, _stat = api.get_archive(container, path, chunk_size=_ARCHIVE_CHUNK)
            except docker.errors.NotFound:
                self._require_container(container)
                invisible = True
        if not invisible:
            return self._guarded(chunks, f"reading {path}")
        code, _, message = self.commands.internal(state, _EXISTS, path)
        if code == _MISSING_EXIT:
            raise FileNotFoundError(path)
        if code != 0:
            raise BackendError(f"cannot read {path}: {message}")
        return self._tar_in_sandbox(container, path)

    def _tar_in_sandbox(self, container: str, path: str) -> Iterator[bytes]:
        """tar's output, streamed; each read may wait up to INTERNAL_TIMEOUT for the next."""
        _, stream = self.commands.start(container, ["sh", "-c", _TAR, "sandhub-tar", path], {})
        errors = HeadTailBuffer(4096)
        try:
            for kind, chunk in stream.frames(lambda: time.monotonic() + INTERNAL_TIMEOUT):
                if kind == 1:
                    yield chunk
                else:
                    errors.write(chunk)
        except Deadline as exc:
            raise BackendError(f"reading {path} stalled") from exc
        finally:
            stream.close()
        if errors.total:
            message = errors.getvalue().decode("utf-8", "replace").strip()
            raise BackendError(f"reading {path}: {message}")

    def _guarded(self, chunks: Iterable[bytes], what: str) -> Iterator[bytes]:
        with self.engine.errors(what):
            yield from chunks

    def _require_container(self, container: str) -> None:
        try:
            self.engine.api().inspect_container(container)
        except docker.errors.NotFound as exc:
            raise SandboxGone(f"sandbox container {container} no longer exists") from exc

    def list_dir(self, state: dict[str, Any], path: str) -> list[FileEntry]:
        code, listing, message = self.commands.internal(state, _LIST, path, cap=_LISTING_CAP)
        if code == _MISSING_EXIT:
            raise FileNotFoundError(path)
        if code != 0 and not listing:
            raise BackendError(f"cannot list {path}: {message}")
        # Unreadable subdirectories make find exit 1 but still list the rest: keep what we got.
        return _parse_listing(listing)


def _owned_by_sandbox(tar_stream: bytes) -> bytes:
    """The archive with every member owned by the sandbox user and no set-id bits.

    The engine extracts as root and keeps the owners written in the archive, and the sandbox
    user cannot chown (no capabilities), so root-owned files would be stuck read-only. Parent
    directories the archive only implies are created root-owned too, so they are added as
    members. Archives that are already right (what the services build) go through as they
    are, uncopied. Device nodes and fifos are refused: nothing in a workspace needs them.
    """
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_stream), mode="r:*") as archive:
            members = archive.getmembers()
            for member in members:
                if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                    raise BackendError(
                        f"archive member {member.name} is not a file, directory or link"
                    )
                if _member_path(member).split("/")[0] == "..":
                    raise BackendError(f"archive member {member.name} leaves the destination")
            listed = {_member_path(m) for m in members if m.isdir()}
            implied = {d for m in members for d in _parents(_member_path(m))} - listed
            if not implied and all(_well_owned(m) for m in members):
                return tar_stream
            return _rebuilt(archive, members, listed)
    except tarfile.TarError as exc:
        raise BackendError(f"not a valid tar archive: {exc}") from exc


def _rebuilt(archive: tarfile.TarFile, members: list[tarfile.TarInfo], listed: set[str]) -> bytes:
    output = io.BytesIO()
    with tarfile.open(fileobj=output, mode="w", format=tarfile.PAX_FORMAT) as out:
        for member in members:
            for parent in _parents(_member_path(member)):
                if parent not in listed:
                    listed.add(parent)
                    directory = tarfile.TarInfo(parent)
                    directory.type, directory.mode, directory.mtime = (
                        tarfile.DIRTYPE,
                        0o755,
                        member.mtime,
                    )
                    out.addfile(_owned(directory))
            content = archive.extractfile(member) if member.isfile() else None
            out.addfile(_owned(member), content)
    return output.getvalue()


def _owned(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid, member.gid = SANDBOX_UID, SANDBOX_GID
    member.uname = member.gname = "sandbox"
    member.mode &= 0o1777
    return member


def _member_path(member: tarfile.TarInfo) -> str:
    return posixpath.normpath(member.name.lstrip("/")).removeprefix("./")


def _parents(path: str) -> list[str]:
    """Ancestors of a relative archive path, outermost first ("a/b/c" -> ["a", "a/b"])."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts)) if parts[i] not in ("", ".", "..")]


def _well_owned(member: tarfile.TarInfo) -> bool:
    return member.uid == SANDBOX_UID and member.gid == SANDBOX_GID and not member.mode & 0o6000


def _parse_listing(listing: bytes) -> list[FileEntry]:
    fields = listing.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    entries = []
    for i in range(0, len(fields) - _LIST_FIELDS + 1, _LIST_FIELDS):
        kind, size, mtime, mode, name, path = fields[i : i + _LIST_FIELDS]
        entries.append(
            FileEntry(
                name=name.decode("utf-8", "backslashreplace"),
                path=path.decode("utf-8", "backslashreplace"),
                kind=_KINDS.get(kind.decode(), "other"),
                size=int(size),
                mtime=float(mtime),
                mode=mode.decode(),
            )
        )
    return entries
