"""Files in a Docker sandbox: tar streams in and out, run as the sandbox user; listings by `find`.

Nothing here goes through the engine's archive API (get_archive / put_archive): the engine
reads and writes as root, so a download of /etc/shadow (or of a workspace symlink to it) would
succeed where the sandbox user's `cat` is refused, and an unread archive stream holds the
container's lock (exec and inspect on it hang until the stream is collected). Instead `tar`
runs inside the sandbox as the sandbox user, on an exec stream of its own:

- downloads: `tar -c` streams out; the stream is closed as soon as the reader stops (the tar
  dies on its next write), and its end says whether everything could be read;
- uploads: `tar -x` reads exactly the archive's size from stdin (archives.py), in the same
  exec as the checks that come first (archives.UPLOAD_CHECKS: no symbolic link among the
  directories the archive writes into).

This also reaches the tmpfs mounts (/tmp, the home), which the engine cannot see (moby#22020).
"""

from __future__ import annotations

import contextlib
import posixpath
import threading
import time
from collections.abc import Iterator
from typing import IO, Any

from hosts.backends import archives, syncscripts, tarstream
from hosts.backends.base import BackendError, HeadTailBuffer
from hosts.backends.docker.engine import Engine
from hosts.backends.docker.names import WORKSPACE, container_ref
from hosts.backends.docker.plain import exit_code, open_exec
from hosts.backends.docker.stream import Deadline, ExecStream
from hosts.backends.fallback.commands import INTERNAL_TIMEOUT, PlainCommands

# Our scripts' tools, whatever PATH the sandbox's environment sets.
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}

# sh -c _EXTRACT sandhub-untar ROOT DEST SIZE DIR...: the upload checks, then SIZE bytes of
# archive read from stdin into tar -x; one exec for both (an engine exec costs tens of
# milliseconds). A refusal reads the archive to its end first (nothing is written), so the
# sender never waits on a full pipe: it exits LINK_EXIT, or CHECK_FAILED when DEST cannot be
# made. An archive with more directories than one command line holds has them checked in
# batches beforehand (archives.UPLOAD_PREPARE), none here.
_EXTRACT = (
    r"""
root=$1 dest=$2 size=$3; shift 3
refuse() { echo "$@" >&2; head -c "$size" >/dev/null; exit 45; }
fail() { [ -n "$1" ] && echo "$1" >&2; head -c "$size" >/dev/null; exit 46; }
"""
    + archives.UPLOAD_CHECKS
    + archives.untar(reader='head -c "$size" | ')
)


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
        with archives.planned(archive) as (source, planned):
            batches = archives.batches(planned.directories)
            if len(batches) > 1:  # more than one command line holds: checked beforehand
                self._prepare(state, dest_dir, batches)
                batches = []
            self._extract(container, dest_dir, source, planned, batches[0] if batches else [])

    def _prepare(self, state: dict[str, Any], dest_dir: str, batches: list[list[str]]) -> None:
        for batch in batches:
            args = (WORKSPACE, dest_dir, *batch)
            done = self.plain.script(state, archives.UPLOAD_PREPARE, "sandhub-prepare", *args)
            failure = archives.checks_failure(dest_dir, done.exit_code, done.stderr)
            if failure is not None:
                raise failure

    def _extract(
        self,
        container: str,
        dest_dir: str,
        source: IO[bytes],
        planned: archives.Plan,
        directories: list[str],
    ) -> None:
        argv = ["sh", "-c", _EXTRACT, "sandhub-untar", WORKSPACE, dest_dir, str(planned.total)]
        exec_id, stream = self._start(container, [*argv, *directories], stdin=True)
        said = HeadTailBuffer(16 * 1024)
        sent = 0
        try:
            # The engine's hijacked connection: written directly, read through ExecStream.
            try:
                for chunk in archives.chunks(source, planned):
                    stream.timed.settimeout(INTERNAL_TIMEOUT)
                    stream.timed.sendall(chunk)
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
        failure = archives.untar_failure(
            dest_dir, code, said.getvalue(), sent=sent == planned.total
        )
        if failure is not None:
            raise failure

    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar of path as the sandbox user reads it, streamed; close() it when done
        (tarstream.py: what it raises, and when)."""
        parent, name = posixpath.split(path.rstrip("/") or "/")
        argv = ["sh", "-c", archives.TAR_CREATE, "sandhub-tar", path, parent or "/", name or "."]
        return self._stream(state, argv, path)

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        """A tar of chosen entries under root (the local client's sync downloads): `tar
        --null -T -` with the names on its stdin, never on a command line or through a
        shell's parsing. The manifest and deletions are agentfirst.py's, for every kind."""
        names = syncscripts.names_blob(paths)
        top = syncscripts.WORKSPACE  # the root is reached from there without a link
        argv = ["sh", "-c", syncscripts.TAR_LIST, "sandhub-tar", root, str(len(names)), top]
        return self._stream(state, argv, root, names)

    def _stream(
        self, state: dict[str, Any], argv: list[str], path: str, names: bytes | None = None
    ) -> Iterator[bytes]:
        """The stdout of a tar command as a started TarStream; `names` (its stdin) are sent
        from a thread of their own while the archive is read: tar takes them as it goes, so
        with both sides waiting on full buffers a send in line could hang."""
        exec_id, stream = self._start(container_ref(state), argv, stdin=names is not None)
        if names is not None:
            threading.Thread(target=_send, args=(stream.timed, names), daemon=True).start()
        return tarstream.TarStream(_ExecTar(self.engine, exec_id, stream, path), path)

    def _start(self, container: str, command: list[str], *, stdin: bool) -> tuple[str, ExecStream]:
        return open_exec(
            self.engine, container, command, environment=_ENV, stdin=stdin, doing="moving files"
        )


class _ExecTar:
    """A tar's engine exec as a tarstream.TarSource: its frames, then its exit code."""

    def __init__(self, engine: Engine, exec_id: str, stream: ExecStream, path: str) -> None:
        self._engine, self._exec_id, self._stream, self._path = engine, exec_id, stream, path
        self._frames = stream.frames(lambda: time.monotonic() + INTERNAL_TIMEOUT)

    def read(self, errors: HeadTailBuffer) -> bytes | None:
        try:
            for kind, chunk in self._frames:
                if kind == 1:
                    return chunk
                errors.write(chunk)
        except Deadline as exc:
            raise BackendError(f"reading {self._path} stalled") from exc
        except OSError as exc:
            raise BackendError(f"reading {self._path} failed: {exc}") from exc
        return None

    def finish(self) -> int | None:
        self._stream.close()
        return exit_code(self._engine, self._exec_id)

    def close(self) -> None:
        self._stream.close()


def _send(channel: Any, data: bytes) -> None:
    """All of data, or nothing more once the stream is closed or stalls (tar then says
    what it missed at the stream's end)."""
    with contextlib.suppress(OSError):
        channel.settimeout(INTERNAL_TIMEOUT)
        channel.sendall(data)
