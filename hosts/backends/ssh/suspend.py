"""Pause, resume, stop and start of an isolated sandbox on an SSH host: each one root script,
one round trip (isolation.py describes what an isolated sandbox is).

- pause: the sandbox's cgroup frozen (cgroup v1 freezer.state, v2 cgroup.freeze), and
  waited for until the kernel says every process is (FREEZING becomes FROZEN);
- resume: thawed;
- stop: what destroy's first half does (isolation.STOP's halt_isolation: freeze, kill
  every process of the cgroup until none is left, remove the cgroups and the egress rule),
  then whatever the sandbox user still runs outside it killed, the disk unmounted (its
  image kept) and a `stopped` mark left in the sandbox directory (root's: the tenant cannot
  make or remove it), which status() reads;
- start: the cgroups, the disk's mount and the holder (namespaces, user-mode networking and
  its egress rule) made again as provision made them (isolation.CGROUPS, HOLDER), without
  making the user or the disk again; on failure what it made is undone, the sandbox stays
  stopped.

A sandbox without isolation (no cgroup of its own: a host without sudo, bubblewrap, ...) has
nothing to freeze and no holder to make again: Unsupported, saying what would make it work.
"""

from __future__ import annotations

import posixpath
from typing import Any

from hosts.backends.base import BackendError, SandboxGone, Unsupported
from hosts.backends.ssh import egress, isolation, layout
from hosts.backends.ssh.connection import RunResult, SshConnection

__all__ = ["halt", "pause", "restart", "resume"]

TIMEOUT = 60.0
_GONE = 70  # the scripts' exit when the sandbox directory is not there

_HEAD = f"""\
fail() {{ echo "sandhub: $*" >&2; exit 1; }}
[ -d "$dir" ] || {{ echo "sandhub: sandbox $id is gone" >&2; exit {_GONE}; }}
"""

_FREEZE = """\
[ ! -e "$dir/stopped" ] || fail "sandbox $id is stopped: start it rather than pause it"
holder_alive || fail "sandbox $id is not running (its namespaces are gone)"
cg_freeze 1
n=0
until cg_frozen; do
  n=$((n + 1))
  [ "$n" -le 1000 ] || { cg_freeze 0; fail "the processes of sandbox $id did not freeze in 10 s"; }
  sleep 0.01
done
echo ok
"""

_THAW = """\
[ ! -e "$dir/stopped" ] || fail "sandbox $id is stopped: start it rather than resume it"
cg_freeze 0
holder_alive || fail "sandbox $id is not running (its namespaces are gone)"
echo ok
"""

_HALT = """\
halt_isolation
# What the sandbox user still runs outside its cgroup (nothing should): killed too.
n=0
while [ -n "$(ps -o pid= -u "$uid" -U "$uid" 2>/dev/null)" ]; do
  n=$((n + 1))
  [ "$n" -le 500 ] || fail "processes of sandbox $id outlived SIGKILL for 10 s"
  setpriv --reuid="$uid" --regid="$gid" --clear-groups -- kill -s KILL -- -1 2>/dev/null || :
  sleep 0.02
done
unmount_disk
: > "$dir/stopped"
rm -f -- "$dir/holder" "$dir/holder.json" "$dir/holder.ready" "$dir/slirp.ready"
echo ok
"""

_RESTART = (
    """\
if [ ! -e "$dir/stopped" ] && holder_alive; then echo ok; exit 0; fi  # running already
[ -f "$dir/disk.img" ] || fail "the disk of sandbox $id is gone"
undo() {
  rc=$?
  trap - EXIT
  set +e
  if [ "$rc" -ne 0 ]; then halt_isolation 2>/dev/null; unmount_disk 2>/dev/null; fi
  exit "$rc"
}
trap undo EXIT
trap 'exit 129' HUP
trap 'exit 143' TERM
rm -f -- "$dir/cgroups"
"""
    + isolation.CGROUPS
    + """\
if ! mountpoint -q "$dir/workspace" 2>/dev/null; then
  mount -o loop,nodev,nosuid "$dir/disk.img" "$dir/workspace" \\
    || fail "cannot mount the sandbox's disk (no loop device?)"
fi
"""
    + isolation.HOLDER
    + """\
rm -f -- "$dir/stopped"
echo ok
"""
)

_FUNCTIONS = isolation.COMMON + isolation.STOP


def pause(conn: SshConnection, state: dict[str, Any]) -> None:
    _run(conn, state, "pausing", _FREEZE)


def resume(conn: SshConnection, state: dict[str, Any]) -> None:
    _run(conn, state, "resuming", _THAW)


def halt(conn: SshConnection, state: dict[str, Any]) -> None:
    _run(conn, state, "stopping", _HALT)


def restart(conn: SshConnection, state: dict[str, Any]) -> None:
    _run(conn, state, "starting", _RESTART, _start_variables(state))


def _run(
    conn: SshConnection,
    state: dict[str, Any],
    doing: str,
    body: str,
    extra: dict[str, str] | None = None,
) -> None:
    variables = {**_variables(state), **(extra or {})}
    command = layout.script_command(_FUNCTIONS + _HEAD + body, variables, sudo=True)
    result = conn.run(command, timeout=TIMEOUT)
    if result.exit_code == _GONE:
        raise SandboxGone(f"sandbox {state['sandbox_id']} is no longer on {conn.target.where}")
    if not result.ok:
        raise BackendError(_failure(conn, f"{doing} sandbox {state['sandbox_id']}", result))


def _variables(state: dict[str, Any]) -> dict[str, str]:
    """The scripts' common variables, each checked before it reaches a shell."""
    if not state.get("isolated"):
        raise Unsupported(
            "this SSH host does not isolate sandboxes (no cgroup or namespaces of their "
            "own: see the host's isolation_missing in admin), so its sandboxes cannot be "
            "paused, stopped or started again; delete the sandbox instead, or use a Docker "
            "host or an isolated SSH host"
        )
    try:
        sandbox_id = layout.check_sandbox_id(state.get("sandbox_id"))
        directory = str(state["dir"])
        base = layout.check_base_dir(posixpath.dirname(directory))
        uid, gid = int(state["uid"]), int(state["gid"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BackendError(f"not an isolated sandbox's state: {exc}") from None
    if posixpath.basename(directory) != sandbox_id or uid <= 0:
        raise BackendError(f"not an isolated sandbox's state: {directory!r}, uid {uid}")
    return {
        "id": sandbox_id,
        "dir": directory,
        "base": base,
        "uid": str(uid),
        "gid": str(gid),
        "chain": isolation.CHAIN,
    }


def _start_variables(state: dict[str, Any]) -> dict[str, str]:
    """START's variables for a sandbox made already: its limits, network and GPUs (the
    CUDA_VISIBLE_DEVICES provision gave its commands names them)."""
    visible = str((state.get("env") or {}).get("CUDA_VISIBLE_DEVICES", ""))
    gpus = [int(index) for index in visible.split(",") if index.strip().isdigit()]
    return isolation.start_variables(
        state,
        disk_mb=0,  # the disk is there: not made again
        network=bool(state.get("network")),
        devices=isolation.gpu_devices(gpus),
        route=egress.route_from_state(state),  # the same policy as before the stop
    )


def _failure(conn: SshConnection, doing: str, result: RunResult) -> str:
    said = (result.stderr or result.stdout).decode(errors="replace").strip()
    said = "\n".join(said.splitlines()[-5:])[:800]
    code = "no exit code" if result.exit_code is None else f"exit {result.exit_code}"
    return f"{doing} on {conn.target.where} failed ({code}): {said or 'no message'}"
