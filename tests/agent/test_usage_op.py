"""The agent's `usage` op (agent/inside/usage.py) without Docker: cgroup v1 and v2 trees made
in tmp_path (the pid check, the namespaced mount, "max", v1's "no limit", memory without
inactive_file), the workspace by statvfs or a bounded walk, the op through the real agent
over pipes, and the per-command script's answer (usagescripts.py) read the same way."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hosts.backends.agent.client import AgentClient
from hosts.backends.agent.inside import usage
from hosts.backends.agentusage import to_sample, usage_call
from hosts.backends.usagescripts import USAGE_SCRIPT, parse_usage

PID = 4242
V1_NO_LIMIT = "9223372036854771712"


def write(base: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def own_cgroup(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    real = usage.usage_read
    monkeypatch.setattr(
        usage, "usage_read", lambda p: text if p == "/proc/self/cgroup" else real(p)
    )


def test_v2_reads_its_own_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, {"cgroup.controllers": "cpu memory pids"})
    write(
        tmp_path / "sandhub" / "sb1",
        {
            "cgroup.procs": f"1\n{PID}",
            "memory.current": "300000000",
            "memory.stat": "anon 1\ninactive_file 100000000\nactive_file 5",
            "memory.max": "536870912",
            "cpu.stat": "usage_usec 2500000\nuser_usec 2000000",
            "cpu.max": "150000 100000",
            "pids.current": "7",
            "pids.max": "max",
        },
    )
    own_cgroup(monkeypatch, "0::/sandhub/sb1")
    got = usage.usage_cgroup(str(tmp_path), PID)
    assert got == {
        "visible": True,
        "cgroup": "v2",
        "cpu_usec": 2_500_000,
        "cpu_limit": 1.5,
        "memory": 200_000_000,
        "memory_limit": 536870912,
        "pids": 7,
        "pids_limit": None,
    }


def test_v1_in_a_container_reads_the_mount_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Docker: /proc/self/cgroup names /docker/<id>, the mount shows that cgroup as its root."""
    procs = {"cgroup.procs": f"1\n{PID}"}
    write(
        tmp_path / "memory",
        {
            **procs,
            "memory.usage_in_bytes": "5000",
            "memory.limit_in_bytes": V1_NO_LIMIT,
            "memory.stat": "total_inactive_file 1000\ninactive_file 3",
        },
    )
    write(tmp_path / "cpuacct", {**procs, "cpuacct.usage": "3000000000"})
    write(tmp_path / "cpu", {**procs, "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    write(tmp_path / "pids", {**procs, "pids.current": "3", "pids.max": "64"})
    own_cgroup(
        monkeypatch,
        "\n".join(
            f"{i}:{c}:/docker/abc" for i, c in enumerate(["memory", "cpu", "cpuacct", "pids"])
        ),
    )
    got = usage.usage_cgroup(str(tmp_path), PID)
    assert got["visible"] and got["cgroup"] == "v1"
    assert got["memory"] == 4000 and got["memory_limit"] is None
    assert got["cpu_usec"] == 3_000_000 and got["cpu_limit"] is None
    assert (got["pids"], got["pids_limit"]) == (3, 64)


def test_a_cgroup_that_does_not_hold_the_agent_is_not_taken_for_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An isolated SSH sandbox: a cgroup namespace says "/", the mount is the host's."""
    write(tmp_path / "memory", {"cgroup.procs": "", "memory.usage_in_bytes": "999999999"})
    own_cgroup(monkeypatch, "4:memory:/")
    assert usage.usage_cgroup(str(tmp_path), PID) == {"visible": False, "cgroup": "v1"}


def test_a_workspace_of_its_own_is_read_by_statvfs_else_walked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "blob").write_bytes(os.urandom(300_000))
    walked = usage.usage_disk(str(tmp_path))
    assert walked["disk_used"] >= 300_000 and walked["disk_limit"] is None
    assert walked["disk_partial"] is False
    # /dev/shm (or /proc) is a filesystem of its own: statvfs answers, with a limit.
    own = usage.usage_disk("/dev/shm" if os.path.isdir("/dev/shm") else "/proc")
    assert own["disk_limit"] is not None and "disk_partial" not in own


def test_a_huge_tree_is_cut_short_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for number in range(30):
        (tmp_path / f"f{number}").write_bytes(b"x" * 5000)
    monkeypatch.setattr(usage, "USAGE_WALK_ENTRIES", 10)
    used, partial = usage.usage_walk(str(tmp_path))
    assert partial and 0 < used < 30 * 4096


def test_the_op_through_the_agent(agent: AgentClient, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"y" * 10000)
    answer = usage_call(agent, str(tmp_path))
    assert answer["disk_used"] >= 10000 and isinstance(answer["at"], float)
    sample = to_sample(answer)
    assert sample.disk_used_bytes == answer["disk_used"]
    if answer["visible"]:  # this machine's own cgroup, whatever it allows
        assert sample.memory_bytes is not None and sample.memory_bytes > 0


def test_the_per_command_script_reads_what_the_agent_reads(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"z" * 20000)
    done = subprocess.run(
        ["sh", "-c", USAGE_SCRIPT, "sh", str(tmp_path), ""], capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    script = parse_usage(done.stdout.decode())
    agent = usage.usage_sample(str(tmp_path))
    assert script["visible"] == agent["visible"]
    assert script["memory_limit"] == agent["memory_limit"]
    assert script["disk_used"] is not None and script["disk_used"] >= 20000
