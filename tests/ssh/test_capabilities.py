"""What an SSH host can do (hosts/backends/ssh/capabilities.py), without a host: the facts
script's output parsed (today's, with cgroups v1 and v2, and an older one without the
isolation lines), the reasons a host cannot isolate sandboxes, the facts read back from a
probe's details (older ones too), and FACTS_SCRIPT itself run here under sh, also in a
mount namespace whose /proc hides processes.

No network, no database: fast."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

import pytest

from hosts.backends.ssh.capabilities import (
    CGROUP_CONTROLLERS,
    FACTS_SCRIPT,
    TOOLS,
    HostFacts,
    facts_from_details,
    parse_facts,
)

OLD_TOOLS = ("useradd", "userdel", "setpriv", "prlimit", "pkill", "systemd-run", "tmux", "setsid")


def output(*, tools=TOOLS, **values: str) -> str:
    """The facts script's answer, after a login banner and before the next section."""
    lines = {
        "user": "sandhub",
        "uid": "1000",
        "sudo": "1",
        "systemd": "0",
        "python3": "3.11.2",
        **{f"has_{t}": "1" if t in tools else "0" for t in TOOLS},
        "kernel": "6.1.0-18-amd64",
        **values,
    }
    body = "\n".join(f"{k}={v}" for k, v in lines.items())
    return f"Welcome!\n@@sandhub-probe facts@@\n{body}\n@@sandhub-probe sandboxes@@\n0\n"


V1 = {"cgroup": "v1", "cgroup_controllers": " memory cpu pids freezer", "userns": "1"}


def facts(**fields) -> HostFacts:
    """A host with everything isolation needs, but for `fields`."""
    values = {
        "login_user": "sandhub",
        "uid": 1000,
        "sudo": True,
        "systemd": False,
        "python3": "3.11.2",
        "tools": TOOLS,
        "kernel": "6.1.0",
        "cgroup": "v1",
        "cgroup_controllers": CGROUP_CONTROLLERS,
        "userns": True,
    }
    return HostFacts(**(values | fields))


# -- parse_facts -------------------------------------------------------------------------------


def test_a_host_with_everything_is_isolated():
    found = parse_facts(output(**V1, hidepid="1"))
    assert found.tools == TOOLS and found.kernel == "6.1.0-18-amd64"
    assert (found.cgroup, found.cgroup_controllers) == ("v1", CGROUP_CONTROLLERS)
    assert found.userns and found.hidepid and found.per_sandbox_users
    assert found.isolation_missing == () and found.isolated


def test_cgroup_v2_controllers_and_its_built_in_freezer():
    v2 = {"cgroup": "v2", "userns": "1", "cgroup_freeze": "0"}
    listed = "cpuset cpu io memory hugetlb pids rdma misc"
    found = parse_facts(output(**v2, cgroup_controllers=listed))
    assert found.cgroup_controllers == ("memory", "cpu", "pids", "freezer")  # 6.1: cgroup.freeze
    assert found.isolated
    old = parse_facts(output(**v2, cgroup_controllers=listed, kernel="4.19.0-26-amd64"))
    assert old.cgroup_controllers == ("memory", "cpu", "pids")
    assert old.isolation_missing == ("no cgroup freezer",) and not old.isolated
    frozen = dict(v2, cgroup_freeze="1")  # a cgroup.freeze file seen: whatever the kernel says
    assert "freezer" in parse_facts(output(**frozen, kernel="4.19")).cgroup_controllers
    delegated = parse_facts(output(**v2, cgroup_controllers="cpu pids"))
    assert delegated.isolation_missing == ("no cgroup memory controller",)


def test_cgroup_v1_with_some_controllers_and_none():
    found = parse_facts(output(**dict(V1, cgroup_controllers=" pids memory")))
    assert found.cgroup_controllers == ("memory", "pids")  # in CGROUP_CONTROLLERS' order
    assert found.isolation_missing == ("no cgroup cpu controller", "no cgroup freezer")
    none = parse_facts(output(**dict(V1, cgroup="", cgroup_controllers="")))
    assert (none.cgroup, none.cgroup_controllers) == ("", ())
    assert none.isolation_missing == ("no cgroups at /sys/fs/cgroup (whole-sandbox limits)",)
    odd = parse_facts(output(**dict(V1, cgroup="v3")))
    assert (odd.cgroup, odd.cgroup_controllers) == ("", ())


def test_an_older_scripts_output_still_parses_as_a_host_that_cannot_isolate():
    found = parse_facts(output(tools=OLD_TOOLS).replace("has_bwrap=0\n", ""))
    assert found.per_sandbox_users and found.tools == OLD_TOOLS
    assert (found.cgroup, found.cgroup_controllers, found.userns, found.hidepid) == (
        "",
        (),
        False,
        False,
    )
    assert not found.isolated
    assert found.isolation_missing == (
        "bubblewrap (bwrap) is not installed",
        "unshare is not installed: cannot tell whether user namespaces work",
        "slirp4netns is not installed (network for isolated sandboxes)",
        "nsenter is not installed",
        "iptables is not installed (host traffic to Docker sandboxes)",
        "no cgroups at /sys/fs/cgroup (whole-sandbox limits)",
        "mkfs.ext4 / losetup / mount / umount missing (per-sandbox disk)",
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("banner only\n", "no facts"),
        ("@@sandhub-probe facts@@\nuser=x\n", "incomplete"),
    ],
)
def test_output_cut_short(text, message):
    with pytest.raises(ValueError, match=message):
        parse_facts(text)


# -- isolation_missing -------------------------------------------------------------------------


def without(*tools: str) -> tuple[str, ...]:
    return tuple(t for t in TOOLS if t not in tools)


@pytest.mark.parametrize(
    "fields, reasons",
    [
        ({"sudo": False}, ["no sudo -n: no per-sandbox users"]),
        (
            {"tools": without("useradd")},
            ["useradd / userdel / setpriv missing: no per-sandbox users"],
        ),
        ({"tools": without("bwrap")}, ["bubblewrap (bwrap) is not installed"]),
        ({"userns": False}, ["unprivileged user namespaces are off"]),
        (
            {"userns": False, "tools": without("unshare")},
            ["unshare is not installed: cannot tell whether user namespaces work"],
        ),
        (
            {"tools": without("slirp4netns")},
            ["slirp4netns is not installed (network for isolated sandboxes)"],
        ),
        ({"tools": without("nsenter")}, ["nsenter is not installed"]),
        (
            {"tools": without("iptables")},
            ["iptables is not installed (host traffic to Docker sandboxes)"],
        ),
        ({"cgroup_controllers": ("cpu", "pids")}, ["no cgroup memory controller",
                                                   "no cgroup freezer"]),
        (
            {"tools": without("mkfs.ext4", "losetup")},
            ["mkfs.ext4 / losetup missing (per-sandbox disk)"],
        ),
        ({"tools": without("unshare", "ip", "tmux", "systemd-run", "prlimit")}, []),
    ],
)  # fmt: skip
def test_each_reason_a_host_cannot_isolate(fields, reasons):
    found = facts(**fields)
    assert list(found.isolation_missing) == reasons
    assert found.isolated == (not reasons)
    # systemd or not, the same: limits go through cgroups either way.
    assert dataclasses.replace(found, systemd=True).isolation_missing == found.isolation_missing


def test_hidepid_alone_is_reported_not_required():
    assert facts(hidepid=False).isolated and facts(hidepid=True).isolated


# -- as_dict and facts_from_details ------------------------------------------------------------


def test_facts_travel_in_a_probes_details_and_back():
    found = facts(sudo=False, cgroup="v2", hidepid=True)
    as_dict = found.as_dict()
    assert as_dict["isolated"] is False
    assert as_dict["isolation_missing"] == ["no sudo -n: no per-sandbox users"]
    assert as_dict["cgroup_controllers"] == list(CGROUP_CONTROLLERS)
    assert as_dict["tools"] == list(TOOLS) and as_dict["per_sandbox_users"] is False
    assert facts_from_details({"facts": as_dict}) == found


def test_an_older_probes_details_read_with_safe_defaults():
    old = {
        "login_user": "sandhub",
        "uid": 1000,
        "sudo": True,
        "systemd": True,
        "python3": "3.11.2",
        "tools": list(OLD_TOOLS),
        "kernel": "6.1.0",
        "per_sandbox_users": True,
    }
    found = facts_from_details({"facts": old})
    assert found is not None and found.per_sandbox_users
    assert (found.cgroup, found.cgroup_controllers, found.userns, found.hidepid) == (
        "",
        (),
        False,
        False,
    )
    assert not found.isolated and "bubblewrap (bwrap) is not installed" in found.isolation_missing
    assert facts_from_details({}) is None and facts_from_details({"facts": "x"}) is None
    assert facts_from_details({"facts": {"login_user": "x"}}) is None


# -- FACTS_SCRIPT, run here --------------------------------------------------------------------


def run_script(*prefix: str) -> HostFacts:
    done = subprocess.run(
        [*prefix, "/bin/sh", "-c", "set -u\n" + FACTS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return parse_facts(done.stdout)


def this_machines_cgroups() -> tuple[str, tuple[str, ...]]:
    root = "/sys/fs/cgroup"
    if os.path.exists(f"{root}/cgroup.controllers"):
        with open(f"{root}/cgroup.controllers") as listed:
            names = set(listed.read().split()) | {"freezer"}  # every kernel this runs on is ≥ 5.2
        return "v2", tuple(c for c in CGROUP_CONTROLLERS if c in names)
    found = tuple(c for c in CGROUP_CONTROLLERS if os.path.isfile(f"{root}/{c}/tasks"))
    return ("v1" if found else ""), found


def test_the_script_here_finds_what_this_machine_has():
    found = run_script()
    assert found.uid == os.getuid() and found.login_user
    assert (found.cgroup, found.cgroup_controllers) == this_machines_cgroups()
    sbin = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    assert found.tools == tuple(t for t in TOOLS if shutil.which(t, path=sbin))
    with open("/proc/mounts") as mounts:
        proc = [line.split()[3] for line in mounts if line.split()[1:3] == ["/proc", "proc"]]
    assert found.hidepid is ("hidepid=" in proc[-1] and "hidepid=0" not in proc[-1])


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("unshare"), reason="needs root")
def test_the_script_sees_hidepid_and_user_namespaces_as_an_unprivileged_user_would():
    # A /proc of its own, mounted hiding other users' processes, in a mount namespace of its
    # own (unshare makes it private): nothing of this changes the machine's.
    hidden = run_script(
        "unshare", "--mount", "--pid", "--fork", "/bin/sh", "-c",
        'mount -t proc -o hidepid=2 proc /proc && exec "$@"', "sh",
    )  # fmt: skip
    assert hidden.hidepid
    # As root the script asks as nobody, for whom it is what the sysctls allow.
    allowed = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
         "unshare", "--user", "true"], capture_output=True,
    ).returncode == 0  # fmt: skip
    assert hidden.userns is allowed
