"""What an SSH host offers, as its login user finds it: HostFacts, the script that learns them
(FACTS_SCRIPT, run by hostprobe.host_facts and inside every probe) and its parser.

    facts = parse_facts(output_of_FACTS_SCRIPT)
    facts.per_sandbox_users      # sudo -n + useradd / userdel / setpriv
    facts.isolation_missing      # why sandboxes there cannot be kept apart (none: they can)
    facts.isolated               # per-sandbox users and nothing missing

A sandbox on a shared SSH host is kept apart from other tenants' by namespaces (bubblewrap),
user-mode networking (slirp4netns), whole-sandbox limits through cgroups (memory, cpu, pids,
freezer; cgroupfs v1 or v2, with or without systemd) and a loop-mounted filesystem of its own.
A host that cannot give all of that is offered only to the team it is private to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CGROUP_CONTROLLERS", "FACTS_SCRIPT", "HostFacts", "facts_from_details", "parse_facts"]

MARK = "@@sandhub-probe facts@@"
_SBIN = "/usr/local/sbin:/usr/sbin:/sbin"  # useradd lives there, off a login user's PATH
TOOLS = (
    "useradd",
    "userdel",
    "setpriv",
    "prlimit",
    "pkill",
    "systemd-run",
    "tmux",
    "setsid",
    "bwrap",
    "unshare",
    "nsenter",
    "slirp4netns",
    "iptables",
    "mkfs.ext4",
    "mount",
    "umount",
    "losetup",
    "ip",
)
# The whole-sandbox limits: memory, CPU and pids, and the freezer that stops every process of
# a sandbox before destroy kills them.
CGROUP_CONTROLLERS = ("memory", "cpu", "pids", "freezer")
_DISK_TOOLS = ("mkfs.ext4", "losetup", "mount", "umount")  # a loop-mounted image per sandbox

# POSIX sh. `sudo -n true` is the check the contract asks for: it fails at once, never
# prompts, where a password would be needed. systemd counts as running when
# /run/systemd/system exists (what sd_booted() checks).
# cgroup: v2 when /sys/fs/cgroup is cgroup2 (controllers from its cgroup.controllers; the
# freezer is built in, as cgroup.freeze, since 5.2); v1 when controllers are mounted at
# /sys/fs/cgroup/<name> (a `tasks` file is v1's alone; hybrid hosts count as v1).
# userns: an unprivileged user namespace can be made (as nobody when the login user is root,
# for whom it always can). hidepid: /proc is mounted hiding other users' processes.
FACTS_SCRIPT = f"""\
echo '{MARK}'
echo "user=$(id -un)"
echo "uid=$(id -u)"
if sudo -n true >/dev/null 2>&1; then echo sudo=1; else echo sudo=0; fi
if [ -d /run/systemd/system ]; then echo systemd=1; else echo systemd=0; fi
v=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) || v=
echo "python3=$v"
for t in {" ".join(TOOLS)}; do
  if PATH="$PATH:{_SBIN}" command -v "$t" >/dev/null 2>&1; then echo "has_$t=1"
  else echo "has_$t=0"; fi
done
echo "kernel=$(uname -r 2>/dev/null)"
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
  echo cgroup=v2
  echo "cgroup_controllers=$(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
  f=0
  for x in /sys/fs/cgroup/*/cgroup.freeze; do [ -e "$x" ] && f=1 && break; done
  echo "cgroup_freeze=$f"
else
  v=
  for c in {" ".join(CGROUP_CONTROLLERS)}; do [ -f "/sys/fs/cgroup/$c/tasks" ] && v="$v $c"; done
  if [ -n "$v" ]; then echo cgroup=v1; else echo cgroup=; fi
  echo "cgroup_controllers=$v"
fi
u=
if [ "$(id -u)" = 0 ]; then u="setpriv --reuid=65534 --regid=65534 --clear-groups --"; fi
if PATH="$PATH:{_SBIN}" $u unshare --user --map-current-user true >/dev/null 2>&1 ||
  PATH="$PATH:{_SBIN}" $u unshare --user true >/dev/null 2>&1; then echo userns=1
else echo userns=0; fi
h=0
while read -r _ m t o _; do
  [ "$m" = /proc ] && [ "$t" = proc ] || continue
  case ",$o," in
    *,hidepid=[124],*|*,hidepid=noaccess,*|*,hidepid=invisible,*|*,hidepid=ptraceable,*) h=1 ;;
    *) h=0 ;;
  esac
done < /proc/mounts
echo "hidepid=$h"
"""


@dataclass(frozen=True)
class HostFacts:
    """What an SSH host offers, as its login user finds it."""

    login_user: str
    uid: int
    sudo: bool  # `sudo -n` works: per-sandbox users, systemd scopes
    systemd: bool
    python3: str  # its version ("3.11.2"), "" when missing
    tools: tuple[str, ...] = ()  # of TOOLS, the ones present
    kernel: str = ""
    cgroup: str = ""  # "v2", "v1" or "" (none found at /sys/fs/cgroup)
    cgroup_controllers: tuple[str, ...] = ()  # of CGROUP_CONTROLLERS, the ones usable
    userns: bool = False  # an unprivileged user namespace can be made
    hidepid: bool = False  # /proc hides other users' processes

    @property
    def per_sandbox_users(self) -> bool:
        """Each sandbox gets its own Unix user (needs sudo, useradd / userdel, setpriv)."""
        return self.sudo and {"useradd", "userdel", "setpriv"} <= set(self.tools)

    @property
    def has_python3(self) -> bool:
        return bool(self.python3)

    @property
    def isolation_missing(self) -> tuple[str, ...]:
        """Why sandboxes on this host cannot be kept apart from each other (namespaces,
        user-mode networking, whole-sandbox limits, a disk of their own); empty when they
        can. The same with or without systemd: limits go through cgroups either way."""
        tools = set(self.tools)
        missing: list[str] = []
        if not self.sudo:
            missing.append("no sudo -n: no per-sandbox users")
        elif not self.per_sandbox_users:
            missing.append("useradd / userdel / setpriv missing: no per-sandbox users")
        if "bwrap" not in tools:
            missing.append("bubblewrap (bwrap) is not installed")
        if not self.userns:
            missing.append(
                "unprivileged user namespaces are off"
                if "unshare" in tools
                else "unshare is not installed: cannot tell whether user namespaces work"
            )
        if "slirp4netns" not in tools:
            missing.append("slirp4netns is not installed (network for isolated sandboxes)")
        if "nsenter" not in tools:
            missing.append("nsenter is not installed")
        if "iptables" not in tools:
            missing.append("iptables is not installed (host traffic to Docker sandboxes)")
        if not self.cgroup:
            missing.append("no cgroups at /sys/fs/cgroup (whole-sandbox limits)")
        else:
            missing += [
                f"no cgroup {c}" if c == "freezer" else f"no cgroup {c} controller"
                for c in CGROUP_CONTROLLERS
                if c not in self.cgroup_controllers
            ]
        disk = [t for t in _DISK_TOOLS if t not in tools]
        if disk:
            missing.append(f"{' / '.join(disk)} missing (per-sandbox disk)")
        return tuple(missing)

    @property
    def isolated(self) -> bool:
        """Sandboxes here run in their own namespaces, cgroups and filesystem: the host may
        be shared by teams."""
        return self.per_sandbox_users and not self.isolation_missing

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for ProbeResult.details and the Host row; facts_from_details reads it."""
        return asdict(self) | {
            "tools": list(self.tools),
            "cgroup_controllers": list(self.cgroup_controllers),
            "per_sandbox_users": self.per_sandbox_users,
            "isolated": self.isolated,
            "isolation_missing": list(self.isolation_missing),
        }


def parse_facts(text: str) -> HostFacts:
    """HostFacts from FACTS_SCRIPT's output (its section; text before it is a login banner).
    Output of an older script, without the namespace and cgroup lines, reads as a host
    that has none of them."""
    values: dict[str, str] = {}
    lines = text.splitlines()
    if MARK not in (line.strip() for line in lines):
        raise ValueError("no facts in the host's answer (cut short?)")
    start = [line.strip() for line in lines].index(MARK) + 1
    for line in lines[start:]:
        if line.startswith("@@sandhub-probe "):
            break
        name, eq, value = line.partition("=")
        if eq:
            values[name.strip()] = value.strip()
    if "user" not in values or "sudo" not in values:
        raise ValueError("the host's facts are incomplete (cut short?)")
    kernel = values.get("kernel", "")
    cgroup = values.get("cgroup", "") if values.get("cgroup") in ("v1", "v2") else ""
    found = set(values.get("cgroup_controllers", "").split())
    if cgroup == "v2" and (values.get("cgroup_freeze") == "1" or _kernel_at_least(kernel, 5, 2)):
        found.add("freezer")  # cgroup v2's freezer is cgroup.freeze, in every non-root group
    return HostFacts(
        login_user=values["user"],
        uid=int(values.get("uid") or -1),
        sudo=values.get("sudo") == "1",
        systemd=values.get("systemd") == "1",
        python3=values.get("python3", ""),
        tools=tuple(t for t in TOOLS if values.get(f"has_{t}") == "1"),
        kernel=kernel,
        cgroup=cgroup,
        cgroup_controllers=tuple(c for c in CGROUP_CONTROLLERS if c in found) if cgroup else (),
        userns=values.get("userns") == "1",
        hidepid=values.get("hidepid") == "1",
    )


def facts_from_details(details: Mapping[str, Any]) -> HostFacts | None:
    """The facts a successful probe put in its details; None if it holds none. Details of
    an older probe, without the namespace and cgroup facts, read as a host without them."""
    facts = details.get("facts")
    if not isinstance(facts, Mapping):
        return None
    try:
        return HostFacts(
            login_user=str(facts["login_user"]),
            uid=int(facts["uid"]),
            sudo=bool(facts["sudo"]),
            systemd=bool(facts["systemd"]),
            python3=str(facts.get("python3") or ""),
            tools=tuple(str(t) for t in facts.get("tools") or ()),
            kernel=str(facts.get("kernel") or ""),
            cgroup=str(facts.get("cgroup") or ""),
            cgroup_controllers=tuple(str(c) for c in facts.get("cgroup_controllers") or ()),
            userns=bool(facts.get("userns", False)),
            hidepid=bool(facts.get("hidepid", False)),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _kernel_at_least(release: str, major: int, minor: int) -> bool:
    found = re.match(r"(\d+)\.(\d+)", release)
    return found is not None and (int(found[1]), int(found[2])) >= (major, minor)
