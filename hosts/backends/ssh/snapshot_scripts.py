"""Where SSH snapshots live and the shell scripts that make, restore, move, list and remove
them (snapshots.py says what each does): POSIX sh run with `set -eu` through
layout.script_command. Below provision.py, which restores a snapshot with RESTORE and
restore_variables; no network here.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from hosts.backends.base import BackendError
from hosts.backends.ssh import isolation, layout

__all__ = [
    "DELETE",
    "IMPORT",
    "LIST",
    "RESTORE",
    "RESTORE_PLAIN",
    "TAKE",
    "checked",
    "restore_variables",
    "snapshot_dir",
    "snapshots_dir",
]

SNAPSHOTS_DIR = ".snapshots"
SNAPSHOT_ID_RE = re.compile(r"^snap_[a-z0-9]{6,32}$")
FORMS = ("image", "dir")  # an isolated sandbox's disk image, or a workspace directory


def snapshots_dir(base_dir: str) -> str:
    return posixpath.join(layout.check_base_dir(base_dir), SNAPSHOTS_DIR)


def snapshot_dir(base_dir: str, snapshot_id: str) -> str:
    if not isinstance(snapshot_id, str) or not SNAPSHOT_ID_RE.match(snapshot_id):
        raise BackendError(f"not a snapshot id: {str(snapshot_id)[:40]!r}")
    return posixpath.join(snapshots_dir(base_dir), snapshot_id)


def checked(snapshot_state: dict[str, Any], base_dir: str) -> dict[str, Any]:
    """The state, its directory being exactly where this host keeps that snapshot."""
    directory = snapshot_dir(base_dir, snapshot_state.get("snapshot_id", ""))
    if snapshot_state.get("dir") != directory or snapshot_state.get("form") not in FORMS:
        raise BackendError(f"not a snapshot of this host: {snapshot_state.get('snapshot_id')}")
    return snapshot_state


# As root (or the login user), with $snaps, $snap, $sid, $instance set.
_PARTIAL = """\
fail() { echo "sandhub: $*" >&2; exit 1; }
base=${snaps%/*}
# The base as provision.py makes it (0711: each sandbox user passes through to its own).
if [ ! -d "$base" ]; then (umask 022 && mkdir -p -- "$base") && chmod 0711 -- "$base"; fi
if [ ! -d "$snaps" ]; then mkdir -m 0700 -- "$snaps"; fi
chmod 0700 -- "$snaps"
[ ! -e "$snap" ] || fail "snapshot $sid already exists"
rm -rf --one-file-system -- "$snap.partial"
mkdir -m 0700 -- "$snap.partial"
printf '%s\\n' "$instance" > "$snap.partial/instance"
"""
# What the snapshot takes (blocks) and its disk's size in bytes (0: a directory), last.
_DONE = """\
mv -- "$snap.partial" "$snap"
disk=0
if [ -f "$snap/disk.img" ]; then disk=$(stat -c %s -- "$snap/disk.img"); fi
echo "size $(du -s -B1 -- "$snap" | cut -f1) $disk"
"""

# Taking one: $form is image (an isolated sandbox's disk) or dir; $dir, $id, $user of the
# sandbox; $own: 1 when it has its own user.
TAKE = (
    isolation.COMMON
    + """\
frozen= fsfrozen=
undo() {
  rc=$?
  trap - EXIT
  set +e
  if [ -n "$fsfrozen" ]; then fsfreeze -u "$dir/workspace"; fi
  if [ -n "$frozen" ]; then cg_freeze 0; fi
  if [ "$rc" -ne 0 ]; then rm -rf --one-file-system -- "$snap.partial"; fi
  exit "$rc"
}
trap undo EXIT
cg_wait_frozen() {
  for c in $(cgroups); do
    cg_valid "$c" || continue
    n=0
    while :; do
      if [ -f "$c/freezer.state" ]; then [ "$(cat -- "$c/freezer.state")" = FROZEN ] && break
      elif [ -f "$c/cgroup.events" ]; then grep -qx 'frozen 1' "$c/cgroup.events" && break
      else break
      fi
      n=$((n + 1))
      [ "$n" -le 1000 ] || fail "the processes of sandbox $id did not freeze in 10 s"
      sleep 0.01
    done
  done
}
"""
    + _PARTIAL
    + """\
if [ "$form" = image ]; then
  [ -f "$dir/disk.img" ] && mountpoint -q "$dir/workspace" || fail "sandbox $id has no disk"
  frozen=1
  cg_freeze 1
  cg_wait_frozen
  fsfreeze -f "$dir/workspace" || fail "cannot freeze the disk of sandbox $id"
  fsfrozen=1
  cp --sparse=always --reflink=auto -- "$dir/disk.img" "$snap.partial/disk.img"
  fsfreeze -u "$dir/workspace"
  fsfrozen=
  cg_freeze 0
  frozen=
  chmod 0600 -- "$snap.partial/disk.img"
elif [ -n "$own" ]; then
  uid=$(id -u -- "$user") gid=$(id -g -- "$user")
  mkdir -m 0700 -- "$snap.partial/workspace"
  chown -- "$uid:$gid" "$snap.partial/workspace"
  (cd -- "$snap.partial/workspace" && setpriv --reuid="$uid" --regid="$gid" --clear-groups \\
    -- cp -a --reflink=auto --sparse=always -- "$dir/workspace/." .) \\
    || fail "cannot copy the workspace of sandbox $id"
else
  mkdir -m 0700 -- "$snap.partial/workspace"
  cp -a --reflink=auto --sparse=always -- "$dir/workspace/." "$snap.partial/workspace/"
fi
"""
    + _DONE
)

# Starting a sandbox from one: shell functions for provision.py's script ($snapform: image,
# dir or empty; $snapshot: its directory). restore_workspace runs once the (new, empty)
# workspace is there and before any process of the sandbox does.
RESTORE = """\
copy_snapshot_disk() {
  cp --sparse=always --reflink=auto -- "$snapshot/disk.img" "$dir/disk.img" \\
    && chmod 0600 -- "$dir/disk.img" || fail "cannot copy the disk of snapshot $snapshot"
}
restore_workspace() {
  if [ "$snapform" = dir ]; then
    cp -a --reflink=auto --sparse=always -- "$snapshot/workspace/." "$dir/workspace/" \\
      || fail "cannot copy the workspace of snapshot $snapshot"
  fi
  if [ -n "$uid" ]; then chown -R -h -- "$uid:$gid" "$dir/workspace"; fi
}
"""
# After provision.py's _PROVISION: a sandbox without isolation (isolation.START restores an
# isolated one's, onto its disk).
RESTORE_PLAIN = """\
if [ -z "$isolate" ] && [ -n "$snapform" ]; then
  [ "$snapform" = dir ] || fail "the snapshot holds a disk; this host cannot isolate sandboxes"
  restore_workspace
fi
"""

DELETE = """\
rm -rf --one-file-system -- "$snap" "$snap.partial"
"""
IMPORT = (
    _PARTIAL
    + """\
trap 'rc=$?; [ "$rc" -eq 0 ] || rm -rf --one-file-system -- "$snap.partial"' EXIT
tar -x -f - -C "$snap.partial" --no-same-owner --no-same-permissions
for f in "$snap.partial"/* "$snap.partial"/.[!.]*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  case ${f##*/} in
    instance) ;;
    disk.img) [ -f "$f" ] && [ ! -L "$f" ] || fail "not a snapshot: disk.img" ;;
    workspace) [ -d "$f" ] && [ ! -L "$f" ] || fail "not a snapshot: workspace" ;;
    *) fail "not a snapshot: ${f##*/}" ;;
  esac
done
[ -e "$snap.partial/disk.img" ] || [ -d "$snap.partial/workspace" ] || fail "an empty snapshot"
chmod 0700 -- "$snap.partial"
if [ -f "$snap.partial/disk.img" ]; then chmod 0600 -- "$snap.partial/disk.img"; fi
"""
    + _DONE
)
LIST = """\
for d in "$snaps"/snap_*; do
  [ -d "$d" ] && [ ! -L "$d" ] || continue
  i=$(head -n 1 "$d/instance" 2>/dev/null | head -c 200) || i=
  printf 'S\\t%s\\t%s\\t%s\\n' "${d##*/}" "$(stat -c %Z "$d")" "$i"
done
"""


def restore_variables(
    snapshot_state: dict[str, Any] | None, base_dir: str, disk_mb: int | None
) -> dict[str, str]:
    """provision.py's variables for RESTORE ($snapform empty: no snapshot)."""
    if not snapshot_state:
        return {"snapform": "", "snapshot": ""}
    checked(snapshot_state, base_dir)
    if snapshot_state["form"] == "image":
        wanted = int(snapshot_state.get("disk_mb") or 0)
        if (disk_mb or isolation.DEFAULT_DISK_MB) != wanted:
            raise BackendError(
                f"a sandbox from snapshot {snapshot_state['snapshot_id']} has its {wanted} MB disk"
            )
    return {"snapform": snapshot_state["form"], "snapshot": snapshot_state["dir"]}
