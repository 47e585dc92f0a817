"""Snapshots of SSH sandboxes: their workspace, kept on the host (shell, one round trip each).

    <base>/.snapshots/                  0700, root's (the login user's on a host without sudo)
    <base>/.snapshots/<snapshot id>/    0700
        instance                        the SANDHUB_INSTANCE that took it (reconciliation)
        disk.img                        an isolated sandbox's disk (isolation.py), copied, or
        workspace/                      a copy of a sandbox's workspace directory

No sandbox user ever reads them: the directory is root's and closed, and an isolated
sandbox does not see the base directory at all (its root is a tmpfs with only its own
directory bound in). A snapshot is made in `<id>.partial` and renamed once whole.

Taking one. An isolated sandbox's cgroup is frozen (every process of it stops where it is)
and its filesystem frozen (fsfreeze: what was written reaches the image), the image copied
with `cp --sparse=always --reflink=auto` (holes kept, blocks shared where the filesystem
can), then thawed: a command running meanwhile goes on afterwards, its timeout counting the
freeze. A sandbox without isolation (no cgroup to freeze) has its directory copied with `cp
-a --reflink=auto --sparse=always` while it runs, as its own user: from a directory only that
copy can reach (its current directory, in the root-only snapshot), so a link swapped in by
the sandbox meanwhile leads nowhere its user could not read anyway.

Starting a sandbox from one (provision.py, with RESTORE): an isolated sandbox's disk is a
copy of the snapshot's image, a workspace directory a copy of the snapshot's (cp -a, as
root or the login user, before any process of the sandbox runs), then handed to the new
sandbox's user (chown -R, no link followed).

Moving one to another host: `tar -cS` of it over a channel there, `tar -x` over a channel
here; the platform passes the chunks on as they come (bounded by the channels' windows).
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import select
import shlex
from collections.abc import Iterable, Iterator
from typing import Any

import paramiko

from hosts.backends import tarstream
from hosts.backends.base import (
    LABEL_INSTANCE,
    BackendError,
    HeadTailBuffer,
    ManagedResource,
    SnapshotTaken,
)
from hosts.backends.ssh import layout
from hosts.backends.ssh.connection import RunResult, SshConnection
from hosts.backends.ssh.snapshot_scripts import (
    DELETE,
    IMPORT,
    LIST,
    SNAPSHOT_ID_RE,
    TAKE,
    checked,
    snapshot_dir,
    snapshots_dir,
)
from hosts.backends.ssh.tarstreams import TRANSFER_TIMEOUT, _ChannelTar, _pump
from hosts.backends.ssh.transport import exit_status

TAKE_TIMEOUT = 3600.0  # a disk of many GB on a slow disk
_INSTANCE_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")


def _variables(base_dir: str, snapshot_id: str) -> dict[str, str]:
    return {
        "snaps": snapshots_dir(base_dir),
        "snap": snapshot_dir(base_dir, snapshot_id),
        "sid": snapshot_id,
    }


def _instance(labels: dict[str, str]) -> str:
    instance = labels.get(LABEL_INSTANCE, "")
    if not _INSTANCE_RE.match(instance):
        raise BackendError(f"malformed instance name {instance[:40]!r}")
    return instance


def take(
    conn: SshConnection,
    state: dict[str, Any],
    base_dir: str,
    snapshot_id: str,
    labels: dict[str, str],
) -> SnapshotTaken:
    """Copy the sandbox's workspace under snapshot_id (see the module's docstring)."""
    root = bool(state.get("own_user"))
    form = "image" if state.get("isolated") else "dir"
    variables = _variables(base_dir, snapshot_id) | {
        "instance": _instance(labels),
        "form": form,
        "dir": str(state["dir"]),
        "id": layout.check_sandbox_id(state.get("sandbox_id")),
        "user": str(state.get("user") or ""),
        "own": "1" if root else "",
    }
    result = conn.run(layout.script_command(TAKE, variables, sudo=root), timeout=TAKE_TIMEOUT)
    return _taken(conn, result, f"taking snapshot {snapshot_id}", variables["snap"], root)


def delete(conn: SshConnection, snapshot_state: dict[str, Any], base_dir: str) -> None:
    checked(snapshot_state, base_dir)
    variables = _variables(base_dir, snapshot_state["snapshot_id"])
    command = layout.script_command(DELETE, variables, sudo=bool(snapshot_state.get("root")))
    result = conn.run(command, timeout=TAKE_TIMEOUT)
    if not result.ok:
        raise BackendError(_failure(conn, f"removing snapshot {variables['sid']}", result))


def export(conn: SshConnection, snapshot_state: dict[str, Any], base_dir: str) -> Iterator[bytes]:
    """tar -cS of the snapshot over a channel of its own, streamed; close() it."""
    checked(snapshot_state, base_dir)
    name = "disk.img" if snapshot_state["form"] == "image" else "workspace"
    argv = ["tar", "-c", "-S", "-f", "-", "-C", snapshot_state["dir"], "--", name]
    line = " ".join(shlex.quote(a) for a in argv)
    command = f"sudo -n {line}" if snapshot_state.get("root") else line
    channel = conn.open_channel()
    try:
        channel.exec_command(command)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        channel.close()
        raise BackendError(f"exporting a snapshot from {conn.target.where}: {exc}") from exc
    return tarstream.TarStream(_ChannelTar(channel, conn), snapshot_state["snapshot_id"])


def import_(
    conn: SshConnection,
    base_dir: str,
    snapshot_id: str,
    labels: dict[str, str],
    chunks: Iterable[bytes],
    *,
    root: bool,
) -> SnapshotTaken:
    """An export() stream, from another host, stored as snapshot_id here."""
    variables = _variables(base_dir, snapshot_id) | {"instance": _instance(labels)}
    command = layout.script_command(IMPORT, variables, sudo=root)
    channel = conn.open_channel()
    said, out = HeadTailBuffer(16 * 1024), bytearray()
    try:
        channel.exec_command(command)
        channel.settimeout(TRANSFER_TIMEOUT)
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            for chunk in chunks:
                channel.sendall(chunk)
            channel.shutdown_write()
        poller = select.poll()
        poller.register(channel.fileno(), select.POLLIN)
        while _pump(channel, poller, out, said):
            del out[:-4096]
        code = _exit(channel)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise BackendError(f"importing a snapshot into {conn.target.where}: {exc}") from exc
    finally:
        channel.close()
    result = RunResult(exit_code=code, stdout=bytes(out), stderr=said.getvalue())
    return _taken(conn, result, f"importing snapshot {snapshot_id}", variables["snap"], root)


def managed(
    conn: SshConnection, base_dir: str, *, sudo: bool, timeout: float = 60.0
) -> list[ManagedResource]:
    """Snapshot directories (whole or `.partial`) under the base, for reconciliation."""
    variables = {"snaps": snapshots_dir(base_dir)}
    result = conn.run(layout.script_command(LIST, variables, sudo=sudo), timeout=timeout)
    if not result.ok:
        raise BackendError(_failure(conn, "listing snapshots", result))
    found = []
    for line in result.stdout.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 4 or parts[0] != "S":
            continue
        snapshot_id = parts[1].removesuffix(".partial")
        if not SNAPSHOT_ID_RE.match(snapshot_id):
            continue
        state = {
            "snapshot_id": snapshot_id,
            "dir": snapshot_dir(base_dir, snapshot_id),
            "form": "dir",
            "root": sudo,
        }
        found.append(
            ManagedResource(
                kind="snapshot",
                label_id=snapshot_id,
                name=posixpath.join(snapshots_dir(base_dir), parts[1]),
                created_at=float(parts[2]) if parts[2].isdigit() else None,
                instance=parts[3],
                state=state,
            )
        )
    return found


def _exit(channel: paramiko.Channel) -> int | None:
    return exit_status(channel, wait=TRANSFER_TIMEOUT)


def _taken(
    conn: SshConnection, result: RunResult, doing: str, directory: str, root: bool
) -> SnapshotTaken:
    """The snapshot a script made, from its last line: "size BYTES DISK_BYTES"."""
    lines = result.stdout.decode(errors="replace").strip().splitlines()
    words = lines[-1].split() if lines else []
    if not result.ok or len(words) != 3 or words[0] != "size":
        raise BackendError(_failure(conn, doing, result))
    try:
        size, disk = int(words[1]), int(words[2])
    except ValueError:
        raise BackendError(_failure(conn, doing, result)) from None
    made = {"snapshot_id": posixpath.basename(directory), "dir": directory, "root": root}
    made |= {"form": "image", "disk_mb": disk // (1024 * 1024)} if disk else {"form": "dir"}
    return SnapshotTaken(state=made, size_bytes=size)


def _failure(conn: SshConnection, doing: str, result: RunResult) -> str:
    said = (result.stderr or result.stdout).decode(errors="replace").strip()
    said = "\n".join(said.splitlines()[-5:])[:800]
    code = "no exit code" if result.exit_code is None else f"exit {result.exit_code}"
    return f"{doing} on {conn.target.where} failed ({code}): {said or 'no message'}"
