"""A sandbox of its own on a shared SSH host: namespaces, a cgroup, a disk (shell, as root).

Where the host can (HostFacts.isolated: sudo, bubblewrap, user namespaces, cgroup controllers,
a loop device, slirp4netns), provision runs START after making the sandbox's user:

- a cgroup of its own (cgroupfs v2 `/sys/fs/cgroup/sandhub/<id>`, or v1 memory, cpu, pids and
  freezer hierarchies under `.../sandhub/<id>`): memory of every process together (swap
  included), CPU quota, pids. Their paths are kept in `<dir>/cgroups` (root's, in the
  sandbox directory that is root's): ENTER and STOP read them there, never from the tenant.
  Where systemd runs, the cgroup is still made by hand: systemd leaves a cgroup it did not
  make alone, and one code path is one that is tested (no systemd on the CI machine).
- a disk: a sparse ext4 image `<dir>/disk.img` of disk_mb, loop-mounted on the workspace;
  writing past it gets ENOSPC, as the Docker backend's loop disk does.
- the holder: `sleep infinity` under bubblewrap, in user, PID, IPC, UTS, cgroup and mount
  namespaces of its own, as the sandbox user, and in a network namespace made one step
  before (by `unshare`, owned by a user namespace of the sandbox user's, so slirp4netns,
  run as that user, may join it; bubblewrap's own would be owned by a namespace no process
  can name). Its root is a tmpfs with the host's top-level directories bound read-only,
  private size-capped /tmp and /dev/shm, empty /var/tmp and /run, the base directory hidden
  (other sandboxes live there) but for this sandbox's own, and the workspace at /workspace.
  The device nodes of the sandbox's GPUs, and only those, are bound in.
- network on: slirp4netns (user-mode networking) as the sandbox user, and an iptables chain
  of the sandbox user's uid for the connections slirp4netns makes on its behalf: with an
  egress policy (egress.py) it accepts TCP to the egress proxy alone (the host's loopback,
  10.0.2.2 inside, allowed to slirp4netns for that) and refuses every other packet; a
  sandbox made before policies keeps the host's loopback refused (--disable-host-loopback)
  and a shared chain refusing the host's own addresses, link-local, and every interface
  but the default route's (Docker bridges). Off: the namespace has a loopback and nothing
  else. With a policy, START also writes the trust bundle (from its stdin) into the
  sandbox directory, and the holder binds it read-only where clients look for CAs.

Everything of the sandbox then runs through ENTER (`enter_prefix`): as root, check the
holder is this sandbox's (its cgroup names the sandbox: a recycled pid is not), join the
cgroups, and `nsenter` every namespace of the holder as the sandbox user, no new privileges.

Why bubblewrap: it is Debian's, small, and made for unprivileged sandboxes (Flatpak's);
it sets up mount, PID, IPC, UTS and user namespaces correctly (pivot_root, /proc of the new
PID namespace, no setuid) where hand-written code would get the corners wrong. nsenter and
unshare (util-linux) do the two things it does not: join a running sandbox, and a network
namespace slirp4netns can join.

STOP (part of destroy) freezes the cgroup, kills what is in it until nothing is, removes
the cgroups, the iptables rule (and the uid's chain) and the disk: no process of the
tenant runs while its files are removed, and the files are removed as the sandbox user
(provision.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from hosts.backends.ssh import egress
from hosts.backends.ssh.egress import EgressRoute

__all__ = [
    "CGROUPS",
    "DEFAULT_DISK_MB",
    "HOLDER",
    "MAKE_DISK",
    "ENTER",
    "NOT_RUNNING_EXIT",
    "START",
    "STOP",
    "enter_prefix",
    "gpu_devices",
    "start_variables",
]

DEFAULT_DISK_MB = 5120  # a sandbox's disk when its spec names none (a sparse file: free)
SHM_MB = 64  # /dev/shm, as Docker gives a container
NOT_RUNNING_EXIT = 70  # ENTER: the sandbox's holder is gone (the host restarted?)
CHAIN = "SANDHUB-EGRESS"

# Shell functions shared by START and STOP (POSIX sh, run as root; $id, $dir set).
COMMON = """\
cgroups() { cat -- "$dir/cgroups" 2>/dev/null || :; }
cg_valid() {
  case $1 in
    /sys/fs/cgroup/sandhub/"$id"|/sys/fs/cgroup/*/sandhub/"$id") return 0 ;;
  esac
  return 1
}
cg_freeze() {  # $1: 1 to freeze, 0 to thaw
  for c in $(cgroups); do
    cg_valid "$c" || continue
    if [ -f "$c/cgroup.freeze" ]; then echo "$1" > "$c/cgroup.freeze" 2>/dev/null || :; fi
    if [ -f "$c/freezer.state" ]; then
      if [ "$1" = 1 ]; then echo FROZEN; else echo THAWED; fi > "$c/freezer.state" 2>/dev/null || :
    fi
  done
}
drop_egress_rule() {  # $1: a uid; its OUTPUT rules (to the shared chain or its own: egress.py)
  case $1 in ''|*[!0-9]*) return 0 ;; esac
  command -v iptables >/dev/null 2>&1 || return 0
  while iptables -w -D OUTPUT -m owner --uid-owner "$1" -j "$chain" 2>/dev/null; do :; done
  while iptables -w -D OUTPUT -m owner --uid-owner "$1" -j "$chain-$1" 2>/dev/null; do :; done
  if iptables -w -F "$chain-$1" 2>/dev/null; then iptables -w -X "$chain-$1"; fi
}
cg_frozen() {  # every cgroup of the sandbox frozen (v1 freezer.state, v2 cgroup.events)
  found=
  for c in $(cgroups); do
    cg_valid "$c" || continue
    if [ -f "$c/freezer.state" ]; then
      [ "$(cat -- "$c/freezer.state")" = FROZEN ] || return 1; found=1
    elif [ -f "$c/cgroup.events" ]; then
      grep -qx 'frozen 1' "$c/cgroup.events" || return 1; found=1
    fi
  done
  [ -n "$found" ]
}
holder_alive() {  # its namespaces' holder runs (a recycled pid is not in its cgroup)
  holder=$(cat -- "$dir/holder" 2>/dev/null) \\
    && grep -q "/sandhub/$id\\$" "/proc/$holder/cgroup" 2>/dev/null
}
cg_pids() {
  for c in $(cgroups); do cg_valid "$c" && cat -- "$c/cgroup.procs" 2>/dev/null; done | sort -u
}
"""

CGROUPS = """\
# The cgroup: v2 (one directory) or v1 (one per controller), limits written before any
# process joins.
cgpaths=
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
  top=/sys/fs/cgroup/sandhub
  mkdir -p "$top" || fail "cannot make the cgroup $top"
  for c in memory cpu pids; do
    echo "+$c" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || :
    echo "+$c" > "$top/cgroup.subtree_control" || fail "no cgroup $c controller for $top"
  done
  mkdir "$top/$id" || fail "cannot make the cgroup $top/$id"
  cgpaths="$top/$id"
else
  for c in memory cpu pids freezer; do
    mkdir -p "/sys/fs/cgroup/$c/sandhub/$id" || fail "cannot make the cgroup $c/sandhub/$id"
    cgpaths="$cgpaths /sys/fs/cgroup/$c/sandhub/$id"
  done
  # CPU time for usage samples (hosts/backends/agentusage.py): cpuacct, where it is a
  # hierarchy apart from cpu's (most hosts mount them together: the cpu cgroup is it).
  a=/sys/fs/cgroup/cpuacct
  if [ -f "$a/tasks" ] && ! [ "$a" -ef /sys/fs/cgroup/cpu ] && mkdir -p "$a/sandhub/$id"; then
    cgpaths="$cgpaths $a/sandhub/$id"
  fi
fi
printf '%s\\n' $cgpaths > "$dir/cgroups"
made_cgroups=1
for c in $cgpaths; do
  if [ "$memory_mb" -gt 0 ]; then
    bytes=$((memory_mb * 1048576))
    if [ -f "$c/memory.max" ]; then
      echo "$bytes" > "$c/memory.max"; echo 0 > "$c/memory.swap.max" 2>/dev/null || :
    fi
    if [ -f "$c/memory.limit_in_bytes" ]; then
      echo "$bytes" > "$c/memory.limit_in_bytes"
      echo "$bytes" > "$c/memory.memsw.limit_in_bytes" 2>/dev/null || :
    fi
  fi
  if [ "$cpu_quota" -gt 0 ]; then
    if [ -f "$c/cpu.max" ]; then echo "$cpu_quota 100000" > "$c/cpu.max"; fi
    if [ -f "$c/cpu.cfs_quota_us" ]; then
      echo 100000 > "$c/cpu.cfs_period_us"; echo "$cpu_quota" > "$c/cpu.cfs_quota_us"
    fi
  fi
  if [ "$pids" -gt 0 ] && [ -f "$c/pids.max" ]; then echo "$pids" > "$c/pids.max"; fi
done
# "$@" run in the cgroups (a shell of its own joins them, then becomes it).
in_cgroups() {
  exec sh -c 'for c in $0; do echo $$ > "$c/cgroup.procs" || exit 1; done; exec "$@"' \
    "$cgpaths" "$@"
}

# A rule a sandbox that had this uid before left behind (its destroy cut short).
drop_egress_rule "$uid"

"""

# The disk made (provision only: a restart mounts the one there, suspend.py).
MAKE_DISK = """\
# The disk: a sparse ext4 image on the workspace, its root directory the sandbox user's (or
# a copy of a snapshot's: snapshot_scripts.RESTORE).
if [ "$snapform" = image ]; then
  copy_snapshot_disk
else
  truncate -s "${disk_mb}M" "$dir/disk.img" && chmod 0600 "$dir/disk.img" \\
    && mkfs.ext4 -q -F -m 0 -E "root_owner=$uid:$gid" "$dir/disk.img" >/dev/null 2>&1 \\
    || fail "cannot make a ${disk_mb} MB disk for the sandbox"
fi
mount -o loop,nodev,nosuid "$dir/disk.img" "$dir/workspace" \\
  || fail "cannot mount the sandbox's disk (no loop device?)"
made_disk=1
chmod 0700 "$dir/workspace"
rm -rf -- "$dir/workspace/lost+found"
if [ -n "$snapform" ]; then restore_workspace; fi

"""

# The holder and, with network, user-mode networking: what a restart makes again.
HOLDER = (
    egress.FIREWALL
    + """\
# The holder. Its root: a tmpfs with the host's top-level directories bound read-only.
set -- --unshare-user --unshare-ipc --unshare-pid --unshare-uts --unshare-cgroup \\
  --disable-userns --hostname sandbox --info-fd 3
for entry in /*; do
  name=${entry#/}
  case $name in proc|dev|tmp|run|workspace|lost+found|'*') continue ;; esac
  if [ -L "$entry" ]; then set -- "$@" --symlink "$(readlink -- "$entry")" "$entry"
  elif [ -d "$entry" ]; then set -- "$@" --ro-bind "$entry" "$entry"
  fi
done
set -- "$@" --dev /dev --proc /proc --size "$((tmp_mb * 1048576))" --tmpfs /tmp \\
  --size "$((shm_mb * 1048576))" --tmpfs /dev/shm --tmpfs /var/tmp --tmpfs /run \\
  --tmpfs "$base" --bind "$dir" "$dir" --bind "$dir/workspace" /workspace --chdir /workspace
for d in $devices; do set -- "$@" --dev-bind-try "$d" "$d"; done
"""
    + egress.BINDS
    + """\
rm -f -- "$dir/holder" "$dir/holder.json" "$dir/holder.ready"
# bubblewrap names its child (fd 3) before the child has built the sandbox: its mounts, its
# pivot_root and the user namespace of --disable-userns come after. A command entering then
# joined namespaces still being built (an unmapped gid: "nsenter: setgid failed", one
# create-then-run in a few). The command bubblewrap runs once all of it is done says so on
# fd 4, and closes it; only then is the holder named.
# With an empty environment: root's from sudo (the whole script in SUDO_COMMAND) would be
# the holder's, which the sandbox reads in /proc.
(
  in_cgroups env -i PATH="$PATH" setsid setpriv --reuid="$uid" --regid="$gid" --clear-groups \\
    -- unshare --user --map-current-user --keep-caps --net -- \\
    sh -c 'ip link set lo up && exec setpriv --inh-caps=-all --ambient-caps=-all -- "$@"' \\
    sh bwrap "$@" -- /bin/sh -c 'echo ready >&4; exec sleep infinity 4>&-'
) 3>"$dir/holder.json" 4>"$dir/holder.ready" </dev/null >/dev/null 2>"$dir/holder.err" &
started=$!
made_holder=1
n=0
until holder=$(sed -n 's/.*"child-pid": *\\([0-9][0-9]*\\).*/\\1/p' "$dir/holder.json") \\
    && [ -n "$holder" ] && [ -s "$dir/holder.ready" ]; do
  n=$((n + 1))
  if [ "$n" -gt 500 ] || ! kill -0 "$started" 2>/dev/null; then
    fail "the sandbox's namespaces did not start: $(tail -c 300 "$dir/holder.err" 2>/dev/null)"
  fi
  sleep 0.01
done
echo "$holder" > "$dir/holder"
# bubblewrap's outer process: in the network namespace, and in the user namespace owning it.
outer=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$holder/status")

# Network on: user-mode networking, and what it may not reach: with an egress policy, the
# proxy alone (egress.py); without (a sandbox made before policies), no address of the host.
if [ -n "$network" ]; then
  loopback=--disable-host-loopback
  if [ -n "$egress_port" ]; then
    egress_firewall
    if [ -n "$egress_loopback" ]; then loopback=; fi
  else
    iface=$(ip -o route show default 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p' | head -n1)
    [ -n "$iface" ] || fail "the host has no default route: no network for the sandbox"
    if iptables -w -N "$chain" 2>/dev/null; then
      iptables -w -A "$chain" -m addrtype --dst-type LOCAL -j REJECT
      iptables -w -A "$chain" -d 169.254.0.0/16 -j REJECT
      iptables -w -A "$chain" ! -o "$iface" -j REJECT
    fi
    echo "$uid" > "$dir/egress-uid"
    iptables -w -I OUTPUT 1 -m owner --uid-owner "$uid" -j "$chain" \\
      || fail "cannot add the sandbox's egress rule (iptables)"
  fi
  (
    in_cgroups env -i PATH="$PATH" setsid setpriv --reuid="$uid" --regid="$gid" \\
      --clear-groups -- slirp4netns --configure --mtu=65520 $loopback --ready-fd=4 \\
      --userns-path="/proc/$outer/ns/user" --netns-type=path "/proc/$outer/ns/net" tap0
  ) 4>"$dir/slirp.ready" </dev/null >/dev/null 2>"$dir/slirp.err" &
  n=0
  until [ -s "$dir/slirp.ready" ]; do
    n=$((n + 1))
    [ "$n" -le 500 ] || fail "user-mode networking did not start: $(tail -c 300 "$dir/slirp.err")"
    sleep 0.01
  done
fi
"""
)

START = egress.TRUST + CGROUPS + MAKE_DISK + HOLDER

# As root, with $id, $dir, $uid set: every process of the sandbox stopped, its cgroups,
# egress rule and disk removed. Safe to run on a sandbox half made, or already stopped.
# halt_isolation is the first part alone (a stop that keeps the sandbox: suspend.py).
STOP = """\
halt_isolation() {
  if [ -s "$dir/cgroups" ]; then
    cg_freeze 1
    n=0
    while pids=$(cg_pids) && [ -n "$pids" ]; do
      n=$((n + 1))
      [ "$n" -le 500 ] || fail "processes of sandbox $id outlived SIGKILL for 10 s:" $pids
      kill -s KILL $pids 2>/dev/null || :
      cg_freeze 0
      sleep 0.02
    done
    cg_freeze 0
    for c in $(cgroups); do cg_valid "$c" && rmdir -- "$c" 2>/dev/null || :; done
    rm -f -- "$dir/cgroups"
  fi
  # The egress rule goes by uid: the one START noted, should the user be gone already (a
  # rule left behind would refuse the loopback to whoever gets the uid next).
  ruled=$(cat -- "$dir/egress-uid" 2>/dev/null || :)
  for u in $uid $ruled; do drop_egress_rule "$u"; done
  rm -f -- "$dir/egress-uid"
}
unmount_disk() {
  if mountpoint -q "$dir/workspace" 2>/dev/null; then
    umount -- "$dir/workspace" 2>/dev/null || umount -l -- "$dir/workspace" \\
      || fail "cannot unmount the disk of sandbox $id"
  fi
}
stop_isolation() {
  halt_isolation
  if [ -f "$dir/disk.img" ]; then
    unmount_disk
    rm -f -- "$dir/disk.img"
  fi
}
"""

# After provision.status's _PRESENT ($present): whether the holder still runs (a recycled pid
# is not in the sandbox's cgroup).
# A sandbox stopped on purpose (suspend.py) is "stopped", a frozen one "paused".
HOLDER_ALIVE = """\
if [ "$present" = yes ]; then
  if [ -e "$dir/stopped" ]; then present=stopped
  elif ! holder_alive; then present=no
  elif cg_frozen; then present=paused
  fi
fi
echo "$present"
"""

# ENTER: "$@" as the sandbox, in its namespaces and cgroups (as root: sudo -n sh -c ENTER).
ENTER = f"""\
gone() {{ echo "sandhub: sandbox $id is not running ($1)" >&2; exit {NOT_RUNNING_EXIT}; }}
holder=$(cat -- "$dir/holder" 2>/dev/null) || gone "it has no namespaces"
grep -q "/sandhub/$id\\$" "/proc/$holder/cgroup" 2>/dev/null || gone "its namespaces are gone"
for c in $(cat -- "$dir/cgroups"); do
  case $c in /sys/fs/cgroup/*sandhub/"$id") echo $$ > "$c/cgroup.procs" || exit 71 ;; esac
done
exec nsenter -t "$holder" -a -r -w -S "$uid" -G "$gid" -- setpriv --no-new-privs -- "$@"
"""


def start_variables(
    state: Mapping[str, Any],
    *,
    disk_mb: int,
    network: bool,
    devices: Sequence[str],
    route: EgressRoute | None = None,
) -> dict[str, str]:
    """START's shell variables besides those of provision ($id, $dir, $base, $user); route:
    the egress policy's (None: none, as for a sandbox made before policies)."""
    limits = state.get("limits") or {}
    memory_mb = int(limits.get("memory_mb") or 0)
    return {
        "memory_mb": str(memory_mb),
        "cpu_quota": str(round(float(limits.get("cpus") or 0) * 100000)),
        "pids": str(int(limits.get("pids") or 0)),
        "disk_mb": str(int(disk_mb)),
        # /tmp is memory (tmpfs pages count in the sandbox's cgroup): at most its memory.
        "tmp_mb": str(memory_mb if memory_mb > 0 else 1024),
        "shm_mb": str(min(SHM_MB, memory_mb) if memory_mb > 0 else SHM_MB),
        "network": "1" if network else "",
        "devices": " ".join(devices),
        "chain": CHAIN,
        "egress_addr": "",
        "egress_port": "",
        "egress_loopback": "",
    } | (route.shell_variables() if route is not None else {})


def gpu_devices(gpus: Sequence[int]) -> list[str]:
    """The device nodes a sandbox with these GPUs gets: its /dev/nvidiaN and the shared
    control nodes (bound where they exist); none without GPUs."""
    if not gpus:
        return []
    shared = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
    return [f"/dev/nvidia{int(index)}" for index in gpus] + shared


def enter_prefix(state: Mapping[str, Any]) -> list[str]:
    """argv that runs what follows it inside the sandbox (as root through sudo, then as the
    sandbox user in its namespaces and cgroups): the isolated sandbox's limits_prefix."""
    assigns = "".join(
        f"{name}={shlex.quote(str(value))}\n"
        for name, value in (
            ("id", state["sandbox_id"]),
            ("dir", state["dir"]),
            ("uid", state["uid"]),
            ("gid", state["gid"]),
        )
    )
    return ["sudo", "-n", "/bin/sh", "-c", assigns + ENTER, "sandhub-enter"]
