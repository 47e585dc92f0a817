"""The layout of a sandbox on an SSH host (hosts/backends/ssh/layout.py), without a host:
paths mapped between /workspace and the sandbox's directory, user names, and the command
lines that run a process as the sandbox (sudo, limits, a clean environment)."""

from __future__ import annotations

import shlex

import pytest

from hosts.backends.ssh import layout

# -- layout (no host) --------------------------------------------------------------------------

STATE = layout.make_state(
    base_dir="/srv/sb//", sandbox_id="sb_abc123", user="sbx-abc123", own_user=True,
    limits={"memory_mb": 256, "cpus": 0.5, "pids": 64}, env={"A": "1", "HOME": "/nope"},
)  # fmt: skip
WS = "/srv/sb/sb_abc123/workspace"


def test_layout_paths_users_and_command_lines():
    for path, on_host in [("/workspace", WS), ("//workspace/a/./b/", f"{WS}/a/b"),
                          ("notes", f"{WS}/notes"), ("/workspace/../etc", "/etc"),
                          ("/workspaces", "/workspaces")]:  # fmt: skip
        assert layout.host_path(STATE, path) == on_host
    assert [layout.sandbox_path(STATE, p) for p in (WS, f"{WS}/a", f"{WS}x")] == [
        "/workspace", "/workspace/a", f"{WS}x"]  # fmt: skip
    for sandbox_id, user in (("sb_abc123", "sbx-abc123"), ("wp_abc123", "sbx-wp-abc123")):
        assert layout.user_name(sandbox_id) == user
        assert layout.sandbox_id_of_user(user) == sandbox_id
    assert layout.sandbox_id_of_user("sandhub-ssh-test") is None
    for bad in ("sb_" + "a" * 29, "sb_abc", "sb_abc-12", "root"):  # too long for Linux, ...
        with pytest.raises(layout.LayoutError):
            layout.user_name(bad)
    line = shlex.split(layout.as_sandbox(STATE, ["python3", "-c", "x"], env={"B": "2"}))
    assert line[:12] == ["sudo", "-n", "-u", "sbx-abc123", "--", "prlimit", "--nproc=64",
                         f"--as={256 * 1024 * 1024}", "--", "env", "-i", "--"]  # fmt: skip
    assert line[-3:] == ["python3", "-c", "x"] and "HOME=/nope" not in line
    # The sandbox's own variables (A) only where asked for: the per-command path needs them,
    # the agent gets them over its stdin with each call (never in an argv).
    assert {"B=2", f"HOME={WS}", "SANDHUB_SANDBOX_ID=sb_abc123"} <= set(line)
    assert "A=1" not in line
    own = shlex.split(layout.as_sandbox(STATE, ["true"], env={"B": "2"}, own_env=True))
    assert {"A=1", "B=2"} <= set(own)
    isolated = {**STATE, "isolated": True, "uid": 1234, "gid": 1234}
    entered = shlex.split(layout.as_sandbox(isolated, ["true"]))
    assert entered[:4] == ["sudo", "-n", "/bin/sh", "-c"] and entered[5] == "sandhub-enter"
    assert "uid=1234\n" in entered[4] and "nsenter -t" in entered[4] and "A=1" not in entered
    scoped = shlex.split(layout.as_sandbox({**STATE, "systemd": True}, "true"))
    assert scoped[:8] == ["sudo", "-n", "systemd-run", "--scope", "--quiet", "--collect",
                          "--uid=sbx-abc123", "--gid=sbx-abc123"]  # fmt: skip
    assert {"MemoryMax=256M", "CPUQuota=50%", "TasksMax=64"} <= set(scoped)
    shared = {**STATE, "own_user": False, "user": "login"}
    assert shlex.split(layout.as_sandbox(shared, "true"))[:3] == ["prlimit", "--as=268435456", "--"]
    for bad_env in ({"-u": "x"}, {"A=B": "x"}, {"A": "x\x00"}):
        with pytest.raises(layout.LayoutError):
            layout.as_sandbox(STATE, "true", env=bad_env)
    with pytest.raises(layout.LayoutError):
        layout.as_sandbox(STATE, ["A=1", "true"])
