"""Tar archives on their way into a sandbox (any backend kind): checked, rewritten, streamed.

An upload is unpacked by `tar -x` running as the sandbox user inside the sandbox, so it can
write nothing the sandbox user could not. Before a byte is sent, the archive is read
once for its headers only (`plan`, or a `Planner` fed by a caller that walks the headers for
checks of its own, so they are read once in all): every member must be a file, a directory
or a link that stays inside the destination, and the directories it writes into are listed,
to be checked for symbolic links first. It is then sent (`chunks`) with fresh headers (no
set-id bits, no owner: tar -x runs as the sandbox user with --no-same-owner, so files are
the sandbox user's whatever an archive says), in writes of about SEND_BYTES. The total size
is known in advance, so the sandbox reads exactly that much (`head -c`) and needs no
end-of-file on its stdin, which a TLS connection to a remote engine cannot half-close.

The shell scripts that run as the sandbox user on the per-command paths (Docker, SSH hosts
without python3) are here too: downloads (TAR_CREATE), uploads (UPLOAD_CHECKS, `untar`) and
listings (LIST), with what their ends mean.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from hosts.backends.base import BackendError, FileEntry

CHUNK = 64 * 1024
SEND_BYTES = 256 * 1024  # an upload is sent in writes of about this size (memory: 3x)
MAX_MEMBERS = 10_000  # the services send at most 1000 files; headers are kept while planning
SPOOL_BYTES = 1024 * 1024  # a source that cannot seek is copied, to disk beyond this
_DECIMAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")  # a pax mtime tar -x takes as it is


@dataclass
class _Member:
    info: tarfile.TarInfo  # as it is sent
    offset: int  # of the content in the source
    size: int
    header: bytes  # info's header blocks, made once (they cost more than the content)


@dataclass
class Plan:
    members: list[_Member] = field(default_factory=list)
    # Relative to the destination, parents before children: every directory the archive
    # writes into, whether it names it or only implies it.
    directories: list[str] = field(default_factory=list)
    total: int = 0  # bytes of the archive as sent


class Planner:
    """A plan made a member at a time, for a reader that walks the archive's headers for
    checks of its own (the sync services): one pass over the headers, not two."""

    def __init__(self) -> None:
        self.plan = Plan()
        self._directories: dict[str, None] = {}  # ordered set

    def add(self, member: tarfile.TarInfo) -> None:
        """Check a member read from the source and plan it; BackendError if it may not go."""
        if len(self.plan.members) >= MAX_MEMBERS:
            raise BackendError(f"the archive has more than {MAX_MEMBERS} members")
        sent = _rewritten(member)
        if sent is None:  # the destination itself
            return
        for parent in _parents(sent.name):
            self._directories[parent] = None
        if sent.isdir():
            self._directories[sent.name] = None
        size = sent.size if sent.isfile() else 0
        header = _header(sent)
        self.plan.members.append(_Member(sent, member.offset_data, size, header))
        self.plan.total += len(header) + size + _padding(size)

    def finish(self) -> Plan:
        self.plan.directories = list(self._directories)
        self.plan.total += 2 * tarfile.BLOCKSIZE  # the end-of-archive marker
        return self.plan


class Planned:
    """A seekable archive with its plan already made (Planner): a backend's put_files sends
    it without reading its headers again. Reads as the archive itself for anything else."""

    def __init__(self, source: IO[bytes], plan: Plan) -> None:
        self.source, self.plan = source, plan

    def read(self, size: int = -1) -> bytes:
        return self.source.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.source.seek(offset, whence)

    def tell(self) -> int:
        return self.source.tell()

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        self.source.close()


@contextlib.contextmanager
def planned(archive: bytes | IO[bytes]) -> Iterator[tuple[IO[bytes], Plan]]:
    """(a seekable source, its plan): the plan a Planned archive carries, or one made here
    (reading the headers once); a source made here (a copy) is closed at the end."""
    if isinstance(archive, Planned):
        yield archive.source, archive.plan
        return
    source = seekable(archive)
    try:
        yield source, plan(source)
    finally:
        if source is not archive:
            source.close()


def seekable(archive: bytes | IO[bytes]) -> IO[bytes]:
    """The archive as a file object `plan` and `chunks` can seek in (copied if it cannot)."""
    if isinstance(archive, bytes | bytearray | memoryview):
        return io.BytesIO(archive)
    if getattr(archive, "seekable", lambda: False)():
        return archive
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - returned
    shutil.copyfileobj(archive, spool, CHUNK)
    spool.seek(0)
    return spool


def plan(source: IO[bytes]) -> Plan:
    """Check every member and work out what will be sent, reading headers only."""
    planner = Planner()
    try:
        with tarfile.open(fileobj=source, mode="r:*") as archive:
            for member in archive:
                planner.add(member)
    except tarfile.TarError as exc:
        raise BackendError(f"not a valid tar archive: {exc}") from exc
    return planner.finish()


def chunks(source: IO[bytes], planned: Plan) -> Iterator[bytes]:
    """The archive as planned, in pieces of about SEND_BYTES (few large writes cost less
    than a header, a content and a padding write per member): exactly `planned.total` bytes,
    or BackendError."""
    out = bytearray()
    for member in planned.members:
        info = member.info
        out += member.header
        if member.size:
            source.seek(member.offset)
            left = member.size
            while left:
                block = source.read(min(SEND_BYTES, left))
                if not block:
                    raise BackendError(f"the archive ends inside {info.name}")
                left -= len(block)
                out += block
                if len(out) >= SEND_BYTES:
                    yield bytes(out)
                    out.clear()
            out += bytes(_padding(member.size))
        if len(out) >= SEND_BYTES:
            yield bytes(out)
            out.clear()
    out += bytes(2 * tarfile.BLOCKSIZE)
    yield bytes(out)


def _rewritten(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """The member as the sandbox gets it (None for the destination directory itself)."""
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise BackendError(f"archive member {member.name} is not a file, directory or link")
    if member.issparse():
        raise BackendError(f"archive member {member.name} is a sparse file")
    name = _inside(member.name, member.name)
    if name == ".":
        if member.isdir():
            return None
        raise BackendError(f"archive member {member.name!r} has no name")
    sent = tarfile.TarInfo(name)
    sent.type = tarfile.REGTYPE if member.isfile() else member.type
    sent.size = member.size if member.isfile() else 0
    sent.mode = member.mode & 0o1777  # no set-id bits
    sent.mtime = member.mtime
    exact = member.pax_headers.get("mtime", "")
    if _DECIMAL.fullmatch(exact):  # nanoseconds as sent, not as a float rounds them
        sent.pax_headers = {"mtime": exact}
    if member.issym():
        sent.linkname = member.linkname  # resolved by the sandbox user, like any of theirs
    elif member.islnk():
        sent.linkname = _inside(member.linkname, member.name)
    return sent


def _inside(name: str, member: str) -> str:
    """A relative, normalised archive path that stays inside the destination."""
    path = posixpath.normpath(name.lstrip("/")).removeprefix("./")
    if path == ".." or path.startswith("../"):
        raise BackendError(f"archive member {member} leaves the destination")
    return path or "."


def _parents(path: str) -> list[str]:
    """Ancestors of a relative archive path, outermost first ("a/b/c" -> ["a", "a/b"])."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _header(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _padding(size: int) -> int:
    return -size % tarfile.BLOCKSIZE


# Downloads (both backends): `sh -c TAR_CREATE sandhub-tar PATH DIR NAME` as the sandbox user
# writes a tar of DIR/NAME to stdout, members named after NAME (as the engine's get_archive
# named them). Symlinks in DIR are followed (as the sandbox user); NAME itself is not. It
# exits MISSING_EXIT for a path that is not there, DENIED_EXIT for one the user may not read.
MISSING_EXIT = 44
DENIED_EXIT = 13
TAR_CREATE = r"""
if ! cd "$2" 2>/dev/null; then
    [ -d "$2" ] && { echo "permission denied: $1" >&2; exit 13; }
    echo "no such file or directory: $1" >&2; exit 44
fi
[ -e "$3" ] || [ -L "$3" ] || { echo "no such file or directory: $1" >&2; exit 44; }
[ -L "$3" ] || [ -r "$3" ] || { echo "permission denied: $1" >&2; exit 13; }
exec tar -cf - --warning=no-file-changed -- "$3"
"""
ARGS_BATCH = 64 * 1024  # bytes of paths per command line, well under the kernel's limits


def tar_failure(path: str, code: int | None, message: str) -> Exception | None:
    """What the end of a TAR_CREATE stream means: None when it read everything (exit 1 with
    nothing said: a file changed while it was read), else the error to raise."""
    if code == 0 or (code == 1 and not message):
        return None
    if code == MISSING_EXIT:
        return FileNotFoundError(path)
    if code == DENIED_EXIT:
        return PermissionError()  # the path itself: nothing to add
    if code == LINK_EXIT:  # a sync root reached through a symbolic link (syncscripts.py)
        return NotADirectoryError(message)
    if "Permission denied" in message:
        return PermissionError(message)  # some of what is under it: tar's list
    what = message or (f"tar exited with {code}" if code is not None else "the stream broke")
    return BackendError(f"reading {path}: {what}")


def batches(paths: list[str], limit: int = ARGS_BATCH) -> list[list[str]]:
    """`paths` in batches of at most `limit` bytes of arguments each."""
    out: list[list[str]] = []
    size = limit
    for path in paths:
        if size + len(path) + 1 > limit:
            out.append([])
            size = 0
        out[-1].append(path)
        size += len(path) + 1
    return out


# Uploads on the per-command paths (Docker, SSH): the checks before anything is written.
# DEST's components below ROOT, then each DIR (relative to DEST, parents first), must be a
# directory or not exist yet; then DEST is made and must be writable. ROOT is /workspace as
# the script sees it (on SSH, its directory on the host); messages name /workspace paths. A
# symbolic link is refused, neither followed (it may point anywhere the sandbox user can
# write, /tmp, the home) nor replaced by a directory (the user's link would silently
# disappear). Whoever runs UPLOAD_CHECKS sets $root and $dest, leaves the DIRs in "$@", and
# defines `refuse` (exits LINK_EXIT) and `fail` (DEST cannot be made or written).
LINK_EXIT = 45
CHECK_FAILED = 46  # what an extract that runs the checks first exits with from `fail`
UPLOAD_CHECKS = r"""
check() {
    if [ -L "$1" ]; then
        refuse "$2 is a symbolic link: uploads neither follow links nor replace them;" \
            "upload to the directory it points to, or remove the link first"
    fi
    if [ -e "$1" ] && [ ! -d "$1" ]; then refuse "$2 exists and is not a directory"; fi
}
p=$root
set -f; IFS=/
for part in ${dest#"$root"}; do
    [ -n "$part" ] && p=$p/$part && check "$p" "/workspace${p#"$root"}"
done
set +f; unset IFS
mkdir -p -- "$dest" || fail
[ -w "$dest" ] || fail "$dest is not writable by the sandbox user"
for d in "$@"; do check "$dest/$d" "/workspace${dest#"$root"}/$d"; done
"""
# `sh -c UPLOAD_PREPARE sandhub-prepare ROOT DEST DIR...`: the checks alone, before the tar
# -x (checks_failure reads its end).
UPLOAD_PREPARE = (
    r"""
root=$1 dest=$2; shift 2
refuse() { echo "$@" >&2; exit 45; }
fail() { [ -n "$1" ] && echo "$1" >&2; exit 1; }
"""
    + UPLOAD_CHECKS
)
_UNTAR_STATUS = re.compile(r"sandhub-untar (\d+)\s*$")


def untar(reader: str = "") -> str:
    """Script text: `tar -x` into $dest of the archive on stdin (piped through `reader`, if
    given). Its output (the last of it) and its status come at the end, on stderr, so nothing
    waits to be read while the archive is sent; untar_failure reads them."""
    return (
        "{ " + reader + 'tar -x -p --no-same-owner --no-overwrite-dir -C "$dest" -f - 2>&1\n'
        '  echo "sandhub-untar $?"; } | tail -c 16384 >&2\n'
    )


def checks_failure(dest: str, code: int | None, message: str) -> Exception | None:
    """What the end of the upload checks means: None when they passed, else the error."""
    if code == 0:
        return None
    if code == LINK_EXIT:
        return NotADirectoryError(message)
    return BackendError(f"cannot create directory {dest}: {message}")


def untar_failure(
    dest: str, code: int | None, said: bytes, *, sent: bool = True
) -> Exception | None:
    """What the end of an upload's script (untar, the checks before it if any) means: None
    when tar -x read all of the archive (`sent`: all of it went), else the error to raise."""
    output = said.decode("utf-8", "replace").strip()
    status = _UNTAR_STATUS.search(output)
    if code == 0 and status and status.group(1) == "0" and sent:
        return None
    message = _UNTAR_STATUS.sub("", output).strip() or f"exit code {code}"
    if code in (LINK_EXIT, CHECK_FAILED):
        return checks_failure(dest, code, message)
    # What the sandbox user may not do there is the caller's to fix, not the host's.
    if "Permission denied" in message:
        return PermissionError(message)
    if "Is a directory" in message or "File exists" in message:
        return FileExistsError(message)  # a file where a directory is, or the reverse
    return BackendError(f"unpacking into {dest} failed: {message}")


# Listings (the per-command paths: Docker, SSH hosts without python3): `sh -c LIST sandhub-ls
# PATH` as the sandbox user, one find, NUL-separated so any byte may appear in a name; the
# entries of a directory, or the one entry of anything else. MISSING_EXIT: no such path.
LIST = r"""
fmt='%y\0%s\0%T@\0%m\0%f\0%p\0'
if [ -d "$1" ]; then exec find "$1" -mindepth 1 -maxdepth 1 -printf "$fmt"; fi
if [ -e "$1" ] || [ -L "$1" ]; then exec find "$1" -maxdepth 0 -printf "$fmt"; fi
echo "no such file or directory: $1" >&2; exit 44
"""
LIST_FIELDS = 6
_LIST_KINDS = {"f": "file", "d": "dir", "l": "link"}


def parse_listing(listing: bytes) -> list[FileEntry]:
    fields = listing.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    entries = []
    for i in range(0, len(fields) - LIST_FIELDS + 1, LIST_FIELDS):
        kind, size, mtime, mode, name, path = fields[i : i + LIST_FIELDS]
        entries.append(
            FileEntry(
                name=name.decode("utf-8", "backslashreplace"),
                path=path.decode("utf-8", "backslashreplace"),
                kind=_LIST_KINDS.get(kind.decode(), "other"),
                size=int(size),
                mtime=float(mtime),
                mode=mode.decode(),
            )
        )
    return entries
