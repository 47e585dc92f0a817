"""Uploads and downloads of SSH sandboxes: tar streams over a channel, as the sandbox user.

Each transfer is a session channel of its own on the host's connection, running `tar` as the
sandbox (layout.as_sandbox: its user, its limits), so it reads and writes nothing the sandbox
user could not. Memory stays bounded both ways: an upload is sent SEND_BYTES at a time
(archives.py), a download is handed on as paramiko receives it (its window bounds what is
buffered). The channel is closed on every path: the end, an error, a consumer that stops
reading (TarStream.close).

- uploads: the archive is checked first (archives.plan, or the plan a caller made while
  reading its headers: no absolute or `..` names, only files, directories and links); the
  directories it writes into are checked on the host (a symbolic link among them is
  refused: neither followed nor replaced, as on Docker); then `tar -x` reads the archive
  from the channel, and its messages come at the end, so nothing waits to be read while we
  send;
- downloads: `tar -c` of the path's last component from its parent directory (the members are
  named after it, as on Docker); FileNotFoundError and PermissionError are raised by the call
  itself (the first chunk is read there), errors while reading at the stream's end.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import select
from collections.abc import Callable, Iterator
from typing import IO, Any

import paramiko

from hosts.backends import archives
from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import BackendError, HeadTailBuffer
from hosts.backends.ssh import layout
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.errors import SshConnectionLost, SshError
from hosts.backends.ssh.transport import exit_status, read_ready

__all__ = ["SshTars", "TarStream"]

TRANSFER_TIMEOUT = 60.0  # longest a transfer may stall (no byte either way)
_MISSING_EXIT = 44  # what _TAR and _PREPARE exit with for "no such path"
_LINK_EXIT = 45  # what _PREPARE exits with for a link (or a file) where a directory goes

_TAR = archives.TAR_CREATE

# sh -c _PREPARE sandhub WORKSPACE DEST DIR...: DEST's components below WORKSPACE, then each
# DIR (relative to DEST, parents first) must be a directory or not exist yet.
_PREPARE = r"""
root=$1 dest=$2; shift 2
check() {
    if [ -L "$1" ]; then
        echo "$2 is a symbolic link: uploads neither follow links nor replace them;" \
            "upload to the directory it points to, or remove the link first" >&2
        exit 45
    fi
    if [ -e "$1" ] && [ ! -d "$1" ]; then echo "$2 exists and is not a directory" >&2; exit 45; fi
}
[ -d "$root" ] || { echo "the workspace $root is missing" >&2; exit 44; }
p=$root
set -f; IFS=/
for part in ${dest#"$root"}; do
    [ -n "$part" ] && p=$p/$part && check "$p" "/workspace${p#"$root"}"
done
set +f; unset IFS
mkdir -p -- "$dest" || exit 1
[ -w "$dest" ] || { echo "$dest is not writable by the sandbox user" >&2; exit 1; }
for d in "$@"; do check "$dest/$d" "/workspace${dest#"$root"}/$d"; done
"""

# sh -c _EXTRACT sandhub-untar DEST: the archive comes on stdin, to its end of file. All
# output (the last of it) comes at the end, on stderr, so nothing waits to be read while we
# send.
_EXTRACT = r"""
{ tar -x -p --no-same-owner --no-overwrite-dir -C "$1" -f - 2>&1
  echo "sandhub-untar $?"; } | tail -c 16384 >&2
"""
_EXTRACT_STATUS = re.compile(r"sandhub-untar (\d+)\s*$")


class SshTars:
    """put_files / get_files of one host's sandboxes."""

    def __init__(self, link: AgentLink, connect: Callable[[], SshConnection]) -> None:
        self.link = link
        self.connect = connect

    # --- uploads -------------------------------------------------------------------------------
    def put_files(self, state: dict[str, Any], dest_dir: str, archive: bytes | IO[bytes]) -> None:
        """Unpack a tar archive into dest_dir (/workspace or below) as the sandbox user.

        NotADirectoryError: a directory it writes into is a symbolic link or a file;
        FileExistsError: a file would replace a directory; PermissionError: the sandbox user
        may not write there.
        """
        dest = posixpath.normpath(dest_dir)
        if dest != layout.WORKSPACE and not dest.startswith(layout.WORKSPACE + "/"):
            raise BackendError(
                f"files can only be uploaded under {layout.WORKSPACE}, not into {dest_dir}"
            )
        host_dest = layout.host_path(state, dest)
        source, planned, owned = archives.planned(archive)
        try:
            self._prepare(state, host_dest, planned.directories)
            self._extract(state, host_dest, source, planned)
        finally:
            if owned:
                source.close()

    def _prepare(self, state: dict[str, Any], host_dest: str, directories: list[str]) -> None:
        if host_dest == state["workspace"] and not directories:
            return  # the workspace itself: tar -x says it if it is gone
        for batch in archives.batches(directories) or [[]]:
            code, stderr = self._script(state, _PREPARE, str(state["workspace"]), host_dest, *batch)
            message = stderr.decode("utf-8", "replace").strip()
            if code == _LINK_EXIT:
                raise NotADirectoryError(message)
            if code == _MISSING_EXIT:
                self.link.check_gone(state)
            if code != 0:
                raise BackendError(f"cannot create directory {host_dest}: {message}")

    def _script(self, state: dict[str, Any], script: str, *args: str) -> tuple[int | None, bytes]:
        """(exit code, stderr) of a helper script as the sandbox user: through its agent, or
        over a plain channel on a host without python3 for the agent."""
        try:
            result = self.link.run_script(state, script, *args)
            return result.exit_code, result.stderr
        except AgentUnavailable:
            line = layout.as_sandbox(state, ["sh", "-c", script, "sandhub", *args], cwd="/")
            plain = self.connect().run(line, timeout=TRANSFER_TIMEOUT)
            return plain.exit_code, plain.stderr

    def _extract(
        self, state: dict[str, Any], host_dest: str, source: IO[bytes], planned: archives.Plan
    ) -> None:
        command = layout.as_sandbox(state, ["sh", "-c", _EXTRACT, "sandhub-untar", host_dest])
        connection, channel = self._open(command)
        said = HeadTailBuffer(16 * 1024)
        try:
            channel.settimeout(TRANSFER_TIMEOUT)
            try:
                for chunk in archives.chunks(source, planned):
                    channel.sendall(chunk)
                channel.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException):
                pass  # it stopped reading (or the link broke): what it says below tells why
            poller = select.poll()
            poller.register(channel.fileno(), select.POLLIN)
            while _pump(channel, poller, None, said):
                pass
            code = exit_status(channel, wait=TRANSFER_TIMEOUT)
        finally:
            channel.close()
        output = said.getvalue().decode("utf-8", "replace").strip()
        status = _EXTRACT_STATUS.search(output)
        if code == 0 and status and status.group(1) == "0":
            return
        _check_link(connection)
        self.link.check_gone(state)
        message = _EXTRACT_STATUS.sub("", output).strip() or f"exit status {code}"
        # What the sandbox user may not do there is the caller's to fix, not the host's.
        if "Permission denied" in message:
            raise PermissionError(message)
        if "Is a directory" in message or "File exists" in message:
            raise FileExistsError(message)  # a file where a directory is, or the reverse
        raise BackendError(f"unpacking into {host_dest} failed: {message}")

    # --- downloads -----------------------------------------------------------------------------
    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar of path as the sandbox user reads it, streamed; close() it when done."""
        host = layout.host_path(state, path)
        parent, name = posixpath.split(host.rstrip("/") or "/")
        argv = ["sh", "-c", _TAR, "sandhub-tar", path, parent or "/", name or "."]
        connection, channel = self._open(layout.as_sandbox(state, argv))
        tar = TarStream(channel, path, connection)
        try:
            tar.begin()
        except FileNotFoundError:
            self.link.check_gone(state)
            raise
        return tar

    def _open(self, command: str) -> tuple[SshConnection, paramiko.Channel]:
        connection = self.connect()
        channel = connection.open_channel()
        try:
            channel.exec_command(command)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            channel.close()
            _check_link(connection)
            raise SshError(f"starting a transfer on {connection.target.where}: {exc}") from exc
        return connection, channel


class TarStream(Iterator[bytes]):
    """The stdout of a `tar -c` channel as chunks; close() ends it (and the tar) at once."""

    def __init__(self, channel: paramiko.Channel, path: str, connection: SshConnection) -> None:
        self._channel, self._path, self._connection = channel, path, connection
        self._poller = select.poll()
        self._poller.register(channel.fileno(), select.POLLIN)
        self._errors = HeadTailBuffer(4096)
        self._first: bytes | None = None
        self._done = False

    def begin(self) -> None:
        """Read up to the first bytes of the archive, or the end if there are none."""
        try:
            self._first = self._read()
        except BaseException:
            self.close()
            raise

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
        chunk = bytearray()
        try:
            while not chunk and _pump(self._channel, self._poller, chunk, self._errors):
                pass
        except BaseException:
            self.close()
            _check_link(self._connection)
            raise
        if chunk:
            return bytes(chunk)
        code = exit_status(self._channel, wait=TRANSFER_TIMEOUT)
        self.close()
        if code is None:
            _check_link(self._connection)
        self._finish(code)
        return None

    def _finish(self, code: int | None) -> None:
        message = self._errors.getvalue().decode("utf-8", "replace").strip()
        if (failure := archives.tar_failure(self._path, code, message)) is not None:
            raise failure

    def close(self) -> None:
        self._done = True
        self._first = None
        with contextlib.suppress(Exception):
            self._channel.close()


def _check_link(connection: SshConnection) -> None:
    """SshConnectionLost if the transfer failed because its connection did."""
    if not connection.is_alive():
        where = connection.target.where
        raise SshConnectionLost(f"the connection to {where} was lost during a file transfer")


def _pump(
    channel: paramiko.Channel,
    poller: select.poll,
    out: bytearray | None,
    errors: HeadTailBuffer,
) -> bool:
    """Wait for the channel, then take what stdout (into `out`; None: drop it as stderr) and
    stderr hold; False once both are at their end. BackendError if it stalls."""
    if not read_ready(channel, poller, TRANSFER_TIMEOUT):
        raise BackendError(f"a file transfer stalled for {TRANSFER_TIMEOUT:g} s")
    finished = channel.eof_received or channel.closed
    try:
        while channel.recv_stderr_ready():
            errors.write(channel.recv_stderr(archives.CHUNK))
        if channel.recv_ready():
            data = channel.recv(archives.CHUNK)
            if out is None:
                errors.write(data)
            else:
                out += data
            return True
    except (OSError, EOFError, paramiko.SSHException) as exc:  # a timeout is an OSError
        raise BackendError(f"a file transfer broke: {exc}") from exc
    return not finished
