"""Creating and removing a sandbox on an SSH host: each one shell script, one round trip.

    state = provision(conn, facts, spec, base_dir, instance)   # layout.py describes the tree
    status(conn, state)                           # "running" | "paused" | "stopped" | "missing"
    destroy(conn, state)                                        # idempotent

provision makes the directory tree, writes `.sandhub/instance` first (so even a sandbox left
by a dropped connection is found and removed by reconciliation), and, where the login user
may `sudo -n`, the sandbox's own Unix user; the script undoes what it made on any failure
(EXIT trap), so a failed provision leaves nothing. It runs as root through sudo when the
sandbox has its own user, else as the login user.

destroy kills every process of the sandbox (those whose environment carries its
SANDHUB_SANDBOX_ID marker, or whose command line does: the agent's, whose environment is
closed to the login user as it is not dumpable; with its own user also every process of
that uid, at once with kill(-1) as that user, which a forking process cannot outrun),
waits until none is left, removes the files its user left in the shared temporary
directories (a later user given the same uid would own them), the user, and the directory.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
from typing import Any

from hosts.backends.base import BackendError, SandboxGone, SandboxSpec
from hosts.backends.egress import trust_bundle
from hosts.backends.gpus import gpu_environment
from hosts.backends.ssh import egress, isolation, layout
from hosts.backends.ssh.connection import RunResult, SshConnection
from hosts.backends.ssh.errors import SshError
from hosts.backends.ssh.hostprobe import HostFacts
from hosts.backends.ssh.snapshot_scripts import RESTORE, RESTORE_PLAIN, restore_variables

__all__ = ["destroy", "ensure_present", "provision", "status"]

PROVISION_TIMEOUT = 60.0
DESTROY_TIMEOUT = 60.0
STATUS_TIMEOUT = 15.0
_INSTANCE_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,200}$")

_PROVISION = """\
fail() { echo "sandhub: $*" >&2; exit 1; }
made_dir= made_user= uid= gid=
undo() {
  rc=$?
  trap - EXIT
  set +e
  if [ "$rc" -ne 0 ]; then
    if [ -n "$isolate" ]; then stop_isolation 2>/dev/null; fi
    if [ -n "$made_user" ]; then userdel "$user" >/dev/null 2>&1; fi
    if [ -n "$made_dir" ]; then rm -rf -- "$dir"; fi
  fi
  exit "$rc"
}
trap undo EXIT
trap 'exit 129' HUP
trap 'exit 143' TERM
if [ ! -d "$base" ]; then
  (umask 022 && mkdir -p -- "$base") || fail "cannot create the base directory $base"
  chmod 0711 -- "$base"
  if [ -n "$owner" ]; then chown -- "$owner:" "$base"; fi
fi
if ! mkdir -m 0700 -- "$dir" 2>/dev/null; then
  if [ -e "$dir" ]; then fail "$dir already exists"; fi
  fail "cannot create $dir: $base is not writable by $(id -un)"
fi
made_dir=1
mkdir -m 0700 -- "$dir/.sandhub"
printf '%s\\n' "$instance" > "$dir/.sandhub/instance"
mkdir -m 0700 -- "$dir/workspace" "$dir/.sandhub/jobs"
if [ -n "$own" ]; then
  useradd --no-create-home --home-dir "$dir/workspace" --shell /bin/bash --user-group \\
    --no-log-init --comment "sandhub sandbox $id" -- "$user" >/dev/null \\
    || fail "cannot create the user $user"
  made_user=1
  chown -R -- "$user:$user" "$dir/workspace" "$dir/.sandhub"
  chmod 0711 -- "$dir"
  uid=$(id -u -- "$user") gid=$(id -g -- "$user")
  drop_egress_rule "$uid"  # left by an isolated sandbox that had the uid (isolation.py)
  setpriv --reuid="$uid" --regid="$gid" --clear-groups -- test -w "$dir/workspace" -a \\
    -x "$dir/workspace" || fail "the sandbox user cannot enter $dir/workspace: $base or a \\
directory above it is not open to other users (o+x)"
fi
"""

_DESTROY = """\
fail() { echo "sandhub: $*" >&2; exit 1; }
me=$(id -u) uid= gid=
if [ "$own" = auto ]; then
  own=
  if [ "$me" = 0 ] && id -u -- "$user" >/dev/null 2>&1; then own=1; fi
fi
if [ -n "$own" ] && uid=$(id -u -- "$user" 2>/dev/null); then
  [ "$me" = 0 ] || fail "removing the sandbox user $user needs root (sudo -n)"
  [ "$uid" != 0 ] || fail "refusing: $user has uid 0"
  gid=$(id -g -- "$user")
else
  uid=
fi
# [S]: a pattern that is not the line it finds, so grep does not find its own command line.
marked() {
  grep -lzx -- "[S]ANDHUB_SANDBOX_ID=$id" /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null \\
    | while IFS=/ read -r _ _ p _; do echo "$p"; done
}
owned() {
  if [ -n "$uid" ]; then
    ps -o stat= -o pid= -u "$uid" -U "$uid" 2>/dev/null | awk '$1 !~ /^Z/ { print $2 }'
  fi
}
if [ "$me" = 0 ]; then stop_isolation; fi
n=0
while :; do
  pids=$( { marked; owned; } | sort -u | grep -vx -- "$$" || :)
  [ -n "$pids" ] || break
  n=$((n + 1))
  [ "$n" -le 500 ] || fail "processes of sandbox $id outlived SIGKILL for 10 s:" $pids
  if [ -n "$uid" ]; then
    setpriv --reuid="$uid" --regid="$gid" --clear-groups -- kill -s KILL -- -1 2>/dev/null || :
  fi
  kill -s KILL $pids 2>/dev/null || :
  sleep 0.02  # for the killed to be gone (zombies are not counted)
done
if [ -n "$uid" ]; then
  # As the sandbox user, never as root: a link a tenant swaps in (its other sandboxes still
  # run) then leads only where that user may delete anyway. Two levels: its own entries in
  # the shared temporary directories, and its files in world-writable directories there.
  as_user() { setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"; }
  as_user find /tmp /var/tmp /dev/shm -xdev -maxdepth 2 -path "$base" -prune -o -uid "$uid" \\
    -exec rm -rf -- {} + 2>/dev/null || :
  for d in "$dir/workspace" "$dir/.sandhub"; do
    if [ -d "$d" ] && [ ! -L "$d" ]; then
      as_user chmod -R u+rwX -- "$d" 2>/dev/null || :
      as_user find "$d" -xdev -mindepth 1 -delete 2>/dev/null || :
    fi
  done
  userdel -- "$user" >/dev/null 2>&1 || ! id -u -- "$user" >/dev/null 2>&1 \\
    || fail "cannot remove the user $user: $(userdel -- "$user" 2>&1)"
fi
if [ -e "$dir" ] || [ -L "$dir" ]; then
  rm -rf --one-file-system -- "$dir" 2>/dev/null \\
    || { chmod -R u+rwX -- "$dir" 2>/dev/null; rm -rf --one-file-system -- "$dir"; } \\
    || fail "cannot remove $dir"
fi
echo ok
"""

_DESTROY_SCRIPT = isolation.COMMON + isolation.STOP + _DESTROY


def provision(
    conn: SshConnection,
    facts: HostFacts,
    spec: SandboxSpec,
    base_dir: str,
    instance: str,
    *,
    egress_proxy: object = None,
    timeout: float = PROVISION_TIMEOUT,
) -> dict[str, Any]:
    """Create the sandbox `spec` describes under base_dir; return its backend state.

    Its own Unix user when facts.per_sandbox_users, else it runs as the login user. With
    network, an isolated host's sandbox reaches only the egress proxy (egress.py; the host's
    option egress_proxy says where a remote host reaches it). Raises BackendError (nothing
    left behind) when the host refuses.
    """
    own = facts.per_sandbox_users
    isolate = own and facts.isolated
    route = _egress_route(conn, facts, spec, isolate, egress_proxy)
    try:
        sandbox_id = layout.check_sandbox_id(spec.sandbox_id)
        base = layout.check_base_dir(base_dir)
        proxied: dict[str, str] = {}
        if route is not None and spec.egress is not None:
            proxied = egress.proxy_variables(sandbox_id, spec.egress, route)
        state = layout.make_state(
            base_dir=base,
            sandbox_id=sandbox_id,
            user=layout.user_name(sandbox_id) if own else facts.login_user,
            own_user=own,
            limits={"memory_mb": spec.memory_mb, "cpus": spec.cpus, "pids": spec.pids_limit},
            # Placement's GPUs win over the sandbox's env; none given hides every GPU.
            # The proxy's variables last: the sandbox's own cannot point elsewhere.
            env={**spec.env, **gpu_environment(spec.gpus), **proxied},
            systemd=facts.systemd and own and not isolate,
            isolated=isolate,
            network=spec.network,
        )
    except ValueError as exc:
        raise BackendError(f"cannot create sandbox {spec.sandbox_id!r}: {exc}") from None
    if route is not None:
        state["egress"] = route.as_state()
    if not _INSTANCE_RE.match(instance):
        raise BackendError(f"malformed instance name {instance[:40]!r}")
    variables = {
        "base": base,
        "dir": state["dir"],
        "id": sandbox_id,
        "user": state["user"],
        "own": "1" if own else "",
        "owner": facts.login_user if own else "",
        "instance": instance,
        "isolate": "1" if isolate else "",
        "chain": isolation.CHAIN,
    }
    # From a snapshot: its files copied in before any process of the sandbox runs.
    variables |= restore_variables(spec.snapshot, base, spec.disk_mb)
    body = isolation.COMMON + isolation.STOP + RESTORE + _PROVISION + RESTORE_PLAIN
    if isolate:
        variables |= isolation.start_variables(
            state,
            disk_mb=spec.disk_mb or isolation.DEFAULT_DISK_MB,
            network=spec.network,
            devices=isolation.gpu_devices(spec.gpus),
            route=route,
        )
        body += isolation.START
    command = layout.script_command(body + 'echo "ok ${uid:-} ${gid:-}"\n', variables, sudo=own)
    # The trust bundle on stdin (isolation.START writes it): never in an argv.
    bundle = trust_bundle(spec.egress.ca_pem) if route and spec.egress else None
    try:
        result = conn.run(command, stdin=bundle, timeout=timeout)
    except SshError:
        _undo_quietly(conn, state)  # the script may not have finished, nor undone its part
        raise
    if result.exit_code is None:  # killed, its EXIT trap maybe not run
        _undo_quietly(conn, state)
    if not result.ok:
        raise BackendError(_failure(conn, f"creating sandbox {sandbox_id}", result))
    if isolate:
        state |= _ids(result)
    return state


def _egress_route(
    conn: SshConnection, facts: HostFacts, spec: SandboxSpec, isolate: bool, option: object
) -> egress.EgressRoute | None:
    """Where the sandbox's network may go (None: no network, or a host of one team without
    isolation, whose sandboxes keep the host's network); BackendError before anything is
    made when the policy cannot be kept there."""
    if spec.egress is not None and not isolate:
        missing = "; ".join(facts.isolation_missing) or "no per-sandbox users"
        raise BackendError(
            f"an egress policy needs an isolated SSH host (a network namespace per sandbox), "
            f"and {conn.target.where} is not: {missing}"
        )
    if not isolate or not spec.network:
        return None
    if spec.egress is None:
        raise BackendError(
            f"network without an egress policy: sandbox {spec.sandbox_id} on the isolated host "
            f"{conn.target.where} may reach the network only through the egress proxy"
        )
    return egress.route_for(spec.egress, conn.target.address, option)


def _ids(result: RunResult) -> dict[str, int]:
    """The sandbox user's uid and gid from the provision script's last line "ok UID GID"."""
    words = result.stdout.decode(errors="replace").split()
    try:
        return {"uid": int(words[-2]), "gid": int(words[-1])}
    except (IndexError, ValueError):
        raise BackendError(f"provision said no uid: {words[-3:]!r}") from None


def destroy(
    conn: SshConnection,
    state: dict[str, Any],
    *,
    base_dir: str = layout.DEFAULT_BASE_DIR,
    timeout: float = DESTROY_TIMEOUT,
) -> None:
    """Kill every process of the sandbox, then remove its user and directory. Idempotent: a
    sandbox half made, or already gone, is fine. A state of only {"sandbox_id"} is enough
    (its directory is then taken under base_dir, its own user found if it exists)."""
    sandbox_id = state.get("sandbox_id")
    result = conn.run(destroy_command(state, base_dir=base_dir), timeout=timeout)
    if not result.ok:
        raise BackendError(_failure(conn, f"removing sandbox {sandbox_id}", result))


def destroy_command(state: dict[str, Any], *, base_dir: str = layout.DEFAULT_BASE_DIR) -> str:
    """The shell line destroy runs on the host (as root where it needs to be)."""
    sandbox_id, directory, user, own = _target(state, base_dir)
    variables = {
        "base": posixpath.dirname(directory),
        "dir": directory,
        "id": sandbox_id,
        "user": user,
        "own": own,
        "chain": isolation.CHAIN,
    }
    if own == "auto":  # not known: as root where sudo works (then its user is looked for)
        plain = layout.script_command(_DESTROY_SCRIPT, variables)
        return f"if sudo -n true >/dev/null 2>&1; then sudo -n {plain}; else {plain}; fi"
    return layout.script_command(_DESTROY_SCRIPT, variables, sudo=own == "1")


def status(
    conn: SshConnection, state: dict[str, Any], *, base_dir: str = layout.DEFAULT_BASE_DIR
) -> str:
    """ "running" while the sandbox's directory is there (and, isolated, its namespaces:
    their holder, still in the sandbox's cgroup), "missing" once it is gone; an isolated
    one is "paused" while its cgroup is frozen, "stopped" once stopped (suspend.py)."""
    sandbox_id, directory = _target(state, base_dir)[:2]
    variables = {"dir": directory, "id": sandbox_id}
    if state.get("isolated"):  # /proc of another user's process: root's to read (hidepid)
        script = isolation.COMMON + _PRESENT + isolation.HOLDER_ALIVE
        command = layout.script_command(script, variables, sudo=True)
    else:
        command = layout.script_command(_PRESENT + 'echo "$present"\n', variables)
    result = conn.run(command, timeout=STATUS_TIMEOUT)
    answer = result.stdout.decode(errors="replace").strip().splitlines()
    if not result.ok or not answer or answer[-1] not in _STATUSES:
        raise BackendError(_failure(conn, "checking a sandbox directory", result))
    return _STATUSES[answer[-1]]


_STATUSES = {"yes": "running", "no": "missing", "paused": "paused", "stopped": "stopped"}


_PRESENT = 'if [ -d "$dir" ]; then present=yes; else present=no; fi\n'


def ensure_present(
    conn: SshConnection, state: dict[str, Any], *, base_dir: str = layout.DEFAULT_BASE_DIR
) -> None:
    """SandboxGone when the sandbox's directory has vanished from the host."""
    if status(conn, state, base_dir=base_dir) == "missing":
        raise SandboxGone(
            f"the directory of sandbox {state.get('sandbox_id')} is gone from {conn.target.where}"
        )


# -- helpers -----------------------------------------------------------------------------------


def _target(state: dict[str, Any], base_dir: str) -> tuple[str, str, str, str]:
    """(id, directory, user, own: "1" | "" | "auto") from a state, each checked before it
    reaches a shell: rm -rf and userdel must only ever meet a sandbox's own."""
    try:
        sandbox_id = layout.check_sandbox_id(state.get("sandbox_id"))
        directory = state.get("dir") or layout.sandbox_dir(base_dir, sandbox_id)
        if not isinstance(directory, str):
            raise layout.LayoutError(f"a directory must be a path, not {directory!r}")
        layout.check_base_dir(posixpath.dirname(directory))
        own_user_name = layout.user_name(sandbox_id)
    except ValueError as exc:
        raise BackendError(f"not a sandbox's state: {exc}") from None
    if directory != posixpath.normpath(directory) or posixpath.basename(directory) != sandbox_id:
        raise BackendError(f"not a sandbox directory: {directory!r}")
    own_user = state.get("own_user")
    if own_user is None:
        return sandbox_id, directory, own_user_name, "auto"
    user = str(state.get("user") or "")
    if own_user and user != own_user_name:
        raise BackendError(f"user {user!r} is not the own user of sandbox {sandbox_id}")
    return sandbox_id, directory, user, "1" if own_user else ""


def _undo_quietly(conn: SshConnection, state: dict[str, Any]) -> None:
    # The connection may be gone: reconciliation then finds the sandbox by its instance file.
    with contextlib.suppress(BackendError):
        destroy(conn, state)


def _failure(conn: SshConnection, doing: str, result: RunResult) -> str:
    said = (result.stderr or result.stdout).decode(errors="replace").strip()
    said = "\n".join(said.splitlines()[-5:])[:800]
    code = "no exit code" if result.exit_code is None else f"exit {result.exit_code}"
    return f"{doing} on {conn.target.where} failed ({code}): {said or 'no message'}"
