"""Uploads and downloads of SSH sandboxes: tar streams over a channel, as the sandbox user.

Each transfer is a session channel of its own on the host's connection, running `tar` as the
sandbox (layout.as_sandbox: its user, its limits), so it reads and writes nothing the sandbox
user could not. Memory stays bounded both ways: an upload is sent SEND_BYTES at a time
(archives.py), a download is handed on as paramiko receives it (its window bounds what is
buffered). The channel is closed on every path: the end, an error, a consumer that stops
reading (tarstream.TarStream.close).

- uploads: the archive is checked first (archives.plan, or the plan a caller made while
  reading its headers: no absolute or `..` names, only files, directories and links); the
  directories it writes into are checked on the host (archives.UPLOAD_CHECKS, as on
  Docker); then `tar -x` reads the archive from the channel, to its end of file;
- downloads: `tar -c` of the path's last component from its parent directory (the members are
  named after it, as on Docker), as a tarstream.TarStream; so is a tar of chosen entries.
"""

from __future__ import annotations

import contextlib
import posixpath
import select
from collections.abc import Callable, Iterator
from typing import IO, Any

import paramiko

from hosts.backends import archives, syncscripts, tarstream
from hosts.backends.agent.client import AgentUnavailable
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import BackendError, HeadTailBuffer
from hosts.backends.ssh import layout
from hosts.backends.ssh.channels import start_on_live_connection
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.errors import SshConnectionLost
from hosts.backends.ssh.plain import feed
from hosts.backends.ssh.transport import exit_status, read_ready

__all__ = ["SshTars"]

TRANSFER_TIMEOUT = 60.0  # longest a transfer may stall (no byte either way)
_MISSING_EXIT = 44  # what _PREPARE exits with when the workspace is not there

# sh -c _PREPARE sandhub WORKSPACE DEST DIR...: the upload checks (archives.UPLOAD_PREPARE),
# once the workspace is known to be there (_MISSING_EXIT: the sandbox may be gone).
_PREPARE = (
    r"""
[ -d "$1" ] || { echo "the workspace $1 is missing" >&2; exit 44; }
"""
    + archives.UPLOAD_PREPARE
)
# sh -c _EXTRACT sandhub-untar DEST: the archive comes on stdin, to its end of file.
_EXTRACT = "dest=$1\n" + archives.untar()


class SshTars:
    """put_files / get_files / get_entries of one host's sandboxes."""

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
        with archives.planned(archive) as (source, planned):
            self._prepare(state, host_dest, planned.directories)
            self._extract(state, host_dest, source, planned)

    def _prepare(self, state: dict[str, Any], host_dest: str, directories: list[str]) -> None:
        if host_dest == state["workspace"] and not directories:
            return  # the workspace itself: tar -x says it if it is gone
        for batch in archives.batches(directories) or [[]]:
            code, stderr = self._script(state, _PREPARE, str(state["workspace"]), host_dest, *batch)
            if code == _MISSING_EXIT:
                self.link.check_gone(state)
            message = stderr.decode("utf-8", "replace").strip()
            if (failure := archives.checks_failure(host_dest, code, message)) is not None:
                raise failure

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
        failure = archives.untar_failure(host_dest, code, said.getvalue())
        if failure is not None:
            _check_link(connection)
            self.link.check_gone(state)
            raise failure

    # --- downloads -----------------------------------------------------------------------------
    def get_files(self, state: dict[str, Any], path: str) -> Iterator[bytes]:
        """A tar of path as the sandbox user reads it, streamed; close() it when done."""
        host = layout.host_path(state, path)
        parent, name = posixpath.split(host.rstrip("/") or "/")
        argv = ["sh", "-c", archives.TAR_CREATE, "sandhub-tar", path, parent or "/", name or "."]
        return self._stream(state, argv, path)

    def get_entries(self, state: dict[str, Any], root: str, paths: list[str]) -> Iterator[bytes]:
        """A tar of chosen entries under root (the local client's sync downloads): `tar
        --null -T -` with the names on its stdin, never on a command line. root is a sandbox
        path (/workspace/...), mapped to the host's directory; entries are relative, so
        nothing maps back. The manifest and deletions are agentfirst.py's, for every kind."""
        names = syncscripts.names_blob(paths)
        host_root = layout.host_path(state, root)
        top = layout.host_path(state, syncscripts.WORKSPACE)  # reached without a link
        argv = ["sh", "-c", syncscripts.TAR_LIST, "sandhub-tar", host_root, str(len(names)), top]
        return self._stream(state, argv, root, names)

    def _stream(
        self, state: dict[str, Any], argv: list[str], path: str, names: bytes | None = None
    ) -> Iterator[bytes]:
        """A tar command's stdout as a started TarStream; `names` go to its stdin (from a
        thread when large: tar takes the names as it goes)."""
        connection, channel = self._open(layout.as_sandbox(state, argv))
        if names is not None:
            feed(channel, names)
        try:
            return tarstream.TarStream(_ChannelTar(channel, connection), path)
        except FileNotFoundError:
            self.link.check_gone(state)
            raise

    def _open(self, command: str) -> tuple[SshConnection, paramiko.Channel]:
        # Nothing of the transfer has gone yet: a start that met a dead connection is made
        # again on a new one.
        return start_on_live_connection(self.connect, command, "starting a file transfer")


class _ChannelTar:
    """A tar's channel as a tarstream.TarSource: its output, then its exit status."""

    def __init__(self, channel: paramiko.Channel, connection: SshConnection) -> None:
        self._channel, self._connection = channel, connection
        self._poller = select.poll()
        self._poller.register(channel.fileno(), select.POLLIN)

    def read(self, errors: HeadTailBuffer) -> bytes | None:
        chunk = bytearray()
        try:
            while not chunk and _pump(self._channel, self._poller, chunk, errors):
                pass
        except BaseException:
            self.close()
            _check_link(self._connection)
            raise
        return bytes(chunk) if chunk else None

    def finish(self) -> int | None:
        code = exit_status(self._channel, wait=TRANSFER_TIMEOUT)
        self.close()
        if code is None:
            _check_link(self._connection)
        return code

    def close(self) -> None:
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
