"""Files in a Docker sandbox: tar streams in and out, run as the sandbox user; listings by `find`.

Nothing here goes through the engine's archive API (get_archive / put_archive): the engine
reads and writes as root, so a download of /etc/shadow (or of a workspace symlink to it) would
succeed where the sandbox user's `cat` is refused, and an unread archive stream holds the
container's lock (exec and inspect on it hang until the stream is collected). Instead `tar`
runs inside the sandbox as the sandbox user, on an exec stream of its own:

- downloads: `tar -c` streams out; the stream is closed as soon as the reader stops (the tar
  dies on its next write), and its end says whether everything could be read;
- uploads: `tar -x` reads exactly the archive's size from stdin (archives.py), in the same
  exec as the checks that come first: a symbolic link among the directories the archive
  writes into is refused, neither followed (it may point anywhere the sandbox user can
  write, /tmp, the home) nor replaced by a directory (the user's link would silently
  disappear).

This also reaches the tmpfs mounts (/tmp, the home), which the engine cannot see (moby#22020).
"""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Iterator
from typing import IO, Any

from hosts.backends import archives
from hosts.backends.base import BackendError, HeadTailBuffer
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import WORKSPACE, container_ref
from hosts.backends.docker.plain import exit_code, open_exec
from hosts.backends.docker.stream import Deadline, ExecStream
from hosts.backends.fallback.commands import INTERNAL_TIMEOUT, PlainCommands

_LINK_EXIT = 45  # what _PREPARE exits with for a link (or a file) where a directory goes
# Our scripts' tools, whatever PATH the sandbox's environment sets.
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}

_TAR = archives.TAR_CREATE

# The checks before anything is written: DEST's components below /workspace, then each DIR
# (relative to DEST, parents first) must be a directory or not exist yet; then DEST is made.
# `refuse` is what a check calls (exit _LINK_EXIT); `$dest` and the DIRs are set by the caller.
_CHECKS = r"""
check() {
    if [ -L "$1" ]; then
        refuse "$1 is a symbolic link: uploads neither follow links nor replace them;" \
            "upload to the directory it points to, or remove the link first"
    fi
    if [ -e "$1" ] && [ ! -d "$1" ]; then refuse "$1 exists and is not a directory"; fi
}
p=/workspace
set -f; IFS=/
for part in ${dest#/workspace}; do
    [ -n "$part" ] && p=$p/$part && check "$p"
done
set +f; unset IFS
mkdir -p -- "$dest" || fail
[ -w "$dest" ] || fail "$dest is not writable by the sandbox user"
for d in "$@"; do check "$dest/$d"; done
"""

# sh -c _PREPARE sandhub-prepare DEST DIR...: the checks alone (an archive with more
# directories than one command line holds: they go in batches before _EXTRACT).
_PREPARE = (
    r"""
dest=$1; shift
refuse() { echo "$@" >&2; exit 45; }
fail() { [ -n "$1" ] && echo "$1" >&2; exit 1; }
"""
    + _CHECKS
)

# sh -c _EXTRACT sandhub-untar DEST SIZE DIR...: the checks, then SIZE bytes of archive read
# from stdin into tar -x; one exec for both (an engine exec costs tens of milliseconds). A
# refusal reads the archive to its end first (nothing is written), so the sender never waits
# on a full pipe: it exits _LINK_EXIT, or _CHECK_FAILED when DEST cannot be made. tar's
# output (the last of it) comes at the end, on stderr, so nothing waits to be read while we
# send.
_EXTRACT = (
    r"""
dest=$1 size=$2; shift 2
refuse() { echo "$@" >&2; head -c "$size" >/dev/null; exit 45; }
fail() { [ -n "$1" ] && echo "$1" >&2; head -c "$size" >/dev/null; exit 46; }
"""
    + _CHECKS
    + r"""
{ head -c "$size" | tar -x -p --no-same-owner --no-overwrite-dir -C "$dest" -f - 2>&1
  echo "sandhub-untar $?"; } | tail -c 16384 >&2
"""
)
_EXTRACT_STATUS = re.compile(r"sandhub-untar (\d+)\s*$")
_CHECK_FAILED = 46  # what _EXTRACT exits with when DEST cannot be made or written


class Files:
    """Uploads and downloads, on exec streams of their own (checks through `plain`)."""

    def __init__(self, engine: Engine, plain: PlainCommands) -> None:
        self.engine = engine
        self.plain = plain

    def put_files(self, state: dict[str, Any], dest_dir: str, archive: bytes | IO[bytes]) -> None:
        """Unpack a tar archive into dest_dir, which must be /workspace or below.

        `archive` is read in chunks (a file object that cannot seek is spooled first).
        NotADirectoryError when a directory it writes into is a symbolic link or a file,
        FileExistsError when a file would replace a directory, PermissionError when the
        sandbox user may not write there.
        """
        container = container_ref(state)
        dest_dir = posixpath.normpath(dest_dir)
        if dest_dir != WORKSPACE and not dest_dir.startswith(WORKSPACE + "/"):
            # Everything else writable in a sandbox is scratch (tmpfs): not where files go.
            raise BackendError(f"files can only be uploaded under {WORKSPACE}, not into {dest_dir}")
        source, planned, owned = archives.planned(archive)
        try:
            batches = archives.batches(planned.directories)
            if len(batches) > 1:  # more than one command line holds: checked beforehand
                self._prepare(state, dest_dir, batches)
                batches = []
            self._extract(container, dest_dir, source, planned, batches[0] if batches else [])
        finally:
            if owned:
                source.close()

    def _prepare(self, state: dict[str, Any], dest_dir: str, batches: list[list[str]]) -> None:
        for batch in batches:
            done = self.plain.script(state, _PREPARE, "sandhub-prepare", dest_dir, *batch)
            if done.exit_code == _LINK_EXIT:
                raise NotADirectoryError(done.stderr)
            if done.exit_code != 0:
                raise BackendError(f"cannot create directory {dest_dir}: {done.stderr}")

    def _extract(
        self,
        container: str,
        dest_dir: str,
        source: IO[bytes],
        planned: archives.Plan,
        directories: list[str],
    ) -> None:
        total = str(planned.total)
        command = ["sh", "-c", _EXTRACT, "sandhub-untar", dest_dir, total, *directories]
        exec_id, stream = self._start(container, command, stdin=True)
        said = HeadTailBuffer(16 * 1024)
        sent = 0
        try:
            # The engine's hijacked connection: written directly, read through ExecStream.
            channel = getattr(stream.sock, "_sock", stream.sock)
            try:
                for chunk in archives.chunks(source, planned):
                    channel.settimeout(INTERNAL_TIMEOUT)
                    channel.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # it stopped reading: what it says below tells why
            for _, chunk in stream.frames(lambda: time.monotonic() + INTERNAL_TIMEOUT):
                said.write(chunk)
        except Deadline as exc:
            raise BackendError(f"writing files into {dest_dir} stalled") from exc
        except OSError as exc:
            raise BackendError(f"writing files into {dest_dir} failed: {exc}") from exc
        finally:
            stream.close()
        code = exit_code(self.engine, exec_id)
        output = said.getvalue().decode("utf-8", "replace").strip()
        status = _EXTRACT_STATUS.search(output)
        if code == 0 and status and status.group(1) == "0" and sent == planned.total:
            return
        message = _EXTRACT_STATUS.sub("", output).strip() or f"exit code {code}"
        if code == _LINK_EXIT:
            raise NotADirectoryError(message)
        if code == _CHECK_FAILED:
            raise BackendError(f"cannot create directory {dest_dir}: {message}")
        # What the sandbox user may not do there is the caller's to fix, not the host's.
        if "Permission denied" in message:
            raise PermissionError(message)
        if "Is a directory" in message or "File exists" in message:
            raise FileExistsError(message)  # a file where a directory is, or the reverse
        raise BackendError(f"unpacking into {dest_dir} failed: {message}")

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar of path as the sandbox user reads it, streamed; close() it when done.

        Started here, so FileNotFoundError (missing) and PermissionError (unreadable) are
        raised by this call rather than mid-stream. The stream raises BackendError at its end
        if tar could not read everything (PermissionError for unreadable files inside).
        """
        container = container_ref(state)
        parent, name = posixpath.split(path.rstrip("/") or "/")
        command = ["sh", "-c", _TAR, "sandhub-tar", path, parent or "/", name or "."]
        exec_id, stream = self._start(container, command, stdin=False)
        tar = TarStream(self, exec_id, stream, path)
        try:
            tar.begin()
        except BaseException:
            tar.close()
            raise
        return tar

    def _start(self, container: str, command: list[str], *, stdin: bool) -> tuple[str, ExecStream]:
        return open_exec(
            self.engine, container, command, environment=_ENV, stdin=stdin, doing="moving files"
        )


class TarStream(Iterator[bytes]):
    """The stdout of a `tar -c` exec as chunks; close() ends it (and the tar) at once."""

    def __init__(self, files: Files, exec_id: str, stream: ExecStream, path: str) -> None:
        self._files, self._exec_id, self._stream, self._path = files, exec_id, stream, path
        self._frames = stream.frames(lambda: time.monotonic() + INTERNAL_TIMEOUT)
        self._errors = HeadTailBuffer(4096)
        self._first: bytes | None = None
        self._done = False

    def begin(self) -> None:
        """Read up to the first bytes of the archive, or the end if there are none."""
        self._first = self._read()

    def __next__(self) -> bytes:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self._done:
            raise StopIteration
        chunk = self._read()
        if chunk is None:
            raise StopIteration
        return chunk

    def _read(self) -> bytes | None:
        """The next stdout chunk; at the end, None (or the error tar ended with)."""
        try:
            for kind, chunk in self._frames:
                if kind == 1:
                    return chunk
                self._errors.write(chunk)
        except Deadline as exc:
            self.close()
            raise BackendError(f"reading {self._path} stalled") from exc
        except OSError as exc:
            self.close()
            raise BackendError(f"reading {self._path} failed: {exc}") from exc
        self.close()
        self._finish()
        return None

    def _finish(self) -> None:
        code = exit_code(self._files.engine, self._exec_id)
        message = self._errors.getvalue().decode("utf-8", "replace").strip()
        if (failure := archives.tar_failure(self._path, code, message)) is not None:
            raise failure

    def close(self) -> None:
        self._done = True
        self._first = None
        self._stream.close()
