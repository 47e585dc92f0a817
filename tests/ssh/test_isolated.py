"""An isolated sandbox on a real sshd with real sudo (isolation.py): the agent, the
per-command path and transfers run inside its namespaces, cgroup and disk; destroy leaves
nothing of it on the host."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.base import BackendError, EgressSpec, SandboxGone, SandboxSpec
from hosts.backends.ssh import isolation, layout
from hosts.backends.ssh.backend import SshBackend
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.provision import destroy, ensure_present, provision, status
from tests.ssh import helpers
from tests.ssh.egress_stage import make_ca
from tests.ssh.helpers import INSTANCE, make_backend, sh, user_exists
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd


@pytest.fixture
def backend(sshd: Sshd, base_dir: str, sudo_for_test_user: None) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=True, name="iso-box")
    yield ssh
    ssh.close()


def spec(**changes: Any) -> SandboxSpec:
    values: dict[str, Any] = {
        "sandbox_id": "sb_" + secrets.token_hex(6),
        "image_reference": "",
        "cpus": 1.0,
        "memory_mb": 256,
        "pids_limit": 128,
        "network": False,
        "env": {"SECRET_OF_THE_SANDBOX": "s3cr3t-" + secrets.token_hex(4)},
        "disk_mb": 64,
    }
    values.update(changes)
    return SandboxSpec(**values)


def egress_policy() -> EgressSpec:
    """A policy whose proxy port nothing here connects to (test_egress_ssh.py does)."""
    return EgressSpec(mode="public", proxy_port=9, dns_port=53, token="t", ca_pem=make_ca())


def run(backend: SshBackend, state: dict[str, Any], script: str) -> str:
    result = backend.exec(
        state, ["sh", "-c", script], cwd="/workspace", env={}, timeout=30, output_cap=1 << 20
    )
    assert result.exit_code == 0, result.stderr.decode()
    return result.stdout.decode()


def test_an_isolated_sandbox_runs_in_namespaces_of_its_own(backend: SshBackend) -> None:
    state = backend.provision(spec())
    try:
        assert state["isolated"] and state["uid"] > 0
        assert run(backend, state, "hostname").strip() == "sandbox"
        assert run(backend, state, "pwd").strip() == "/workspace"
        assert run(backend, state, "echo $SECRET_OF_THE_SANDBOX").strip().startswith("s3cr3t-")
        pids = run(backend, state, "ls /proc | grep -c '^[0-9]'")
        assert int(pids) < 10, pids
        assert run(backend, state, "cat /proc/net/dev | tail -n +3 | cut -d: -f1").split() == ["lo"]
        run(backend, state, "echo hello > /workspace/a.txt")
        assert run(backend, state, "cat a.txt") == "hello\n"
        df = run(backend, state, "df -m /workspace | tail -1")
        assert int(df.split()[1]) <= 64, df
    finally:
        backend.destroy(state)
    assert not os.path.exists(state["dir"])


def test_network_on_is_user_mode_and_destroy_removes_its_rule(backend: SshBackend) -> None:
    state = backend.provision(spec(network=True, egress=egress_policy()))
    try:
        links = run(backend, state, "tail -n +3 /proc/net/dev | cut -d: -f1").split()
        assert sorted(links) == ["lo", "tap0"]
        rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True)
        chain = f"{isolation.CHAIN}-{state['uid']}"
        assert f"--uid-owner {state['uid']} -j {chain}" in rules.stdout
    finally:
        backend.destroy(state)
    rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True)
    assert f"--uid-owner {state['uid']} " not in rules.stdout
    assert not os.path.exists(state["dir"])


# -- provision and destroy of isolated sandboxes, seen from the host ----------------------------

RESPAWNER = "setsid sh -c 'while :; do setsid sleep 100 & sleep 0.01; done' >/dev/null 2>&1 &"


def cgroup_dirs(sandbox_id: str) -> list[Path]:
    """The sandbox's cgroup directories on this machine (v1: one per controller)."""
    root = Path("/sys/fs/cgroup")
    return [p for p in (root / "sandhub" / sandbox_id, *root.glob(f"*/sandhub/{sandbox_id}"))
            if p.is_dir()]  # fmt: skip


def processes(sandbox_id: str) -> set[int]:
    return {
        int(pid)
        for d in cgroup_dirs(sandbox_id)
        for pid in (d / "cgroup.procs").read_text().split()
    }


def limit(sandbox_id: str, controller: str, v1_file: str, v2_file: str) -> str:
    """A limit of the sandbox's cgroup as this machine's cgroup version writes it."""
    v2 = Path("/sys/fs/cgroup/sandhub", sandbox_id)
    if v2.is_dir():
        return (v2 / v2_file).read_text().strip()
    return Path("/sys/fs/cgroup", controller, "sandhub", sandbox_id, v1_file).read_text().strip()


def left_of(conn: SshConnection, state: dict[str, Any]) -> list[str]:
    """What of the sandbox is still on the host: directory, user, cgroups, mount, rule."""
    left = [state["dir"]] if os.path.lexists(state["dir"]) else []
    left += [str(d) for d in cgroup_dirs(state["sandbox_id"])]
    if user_exists(conn, state["user"]):
        left.append(state["user"])
    if state["dir"] in Path("/proc/mounts").read_text():
        left.append("mount")
    rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True)
    if f"--uid-owner {state.get('uid')} " in rules.stdout:
        left.append("iptables rule")
    chain = f"{isolation.CHAIN}-{state.get('uid')}"
    if subprocess.run(["iptables", "-w", "-S", chain], capture_output=True).returncode == 0:
        left.append("iptables chain")
    return left


def test_isolated_layout_limits_and_removal(sudo_isolated, base):
    conn, facts = sudo_isolated
    assert facts.isolated
    state = provision(conn, facts, helpers.spec(), base, INSTANCE)
    sid = state["sandbox_id"]
    assert state["isolated"] and state["workspace"] == "/workspace"
    fstype = sh(conn, f"findmnt -n -o FSTYPE {state['dir']}/workspace", root=True).strip()
    assert fstype == "ext4"
    assert limit(sid, "memory", "memory.limit_in_bytes", "memory.max") == str(512 << 20)
    assert limit(sid, "cpu", "cpu.cfs_quota_us", "cpu.max").split()[0] == "150000"
    assert limit(sid, "pids", "pids.max", "pids.max") == "200"
    # The per-command path has the sandbox's variables; nothing else carries them.
    said = sh(conn, layout.as_sandbox(state, "id -un; pwd; env", cwd="/workspace", own_env=True))
    assert said.splitlines()[:2] == [state["user"], "/workspace"]
    assert "GREETING=hi there" in said.splitlines()
    assert "GREETING" not in layout.as_sandbox(state, "true")
    sh(conn, layout.as_sandbox(state, RESPAWNER))
    helpers.wait_for(lambda: len(processes(sid)) >= 4, what="the respawner's sleeps")
    destroy(conn, state)
    assert left_of(conn, state) == []
    destroy(conn, {"sandbox_id": sid}, base_dir=base)  # again, by id only


def test_a_sandbox_whose_namespaces_are_gone(sudo_isolated, base):
    conn, facts = sudo_isolated
    state = provision(conn, facts, helpers.spec(), base, INSTANCE)
    assert status(conn, state) == "running"
    holder = sh(conn, f"cat {state['dir']}/holder", root=True).strip()
    sh(conn, f"kill -KILL {holder}", root=True)  # as a restart of the host would
    helpers.wait_for(lambda: status(conn, state) == "missing", what="the holder's end")
    with pytest.raises(SandboxGone):
        ensure_present(conn, state)
    entered = conn.run(layout.as_sandbox(state, "true"), timeout=30)
    assert entered.exit_code == isolation.NOT_RUNNING_EXIT, entered
    assert b"is not running" in entered.stderr
    destroy(conn, state)
    assert left_of(conn, state) == []


def test_a_failed_isolation_leaves_nothing(sudo_isolated, base):
    conn, facts = sudo_isolated
    too_big = dataclasses.replace(helpers.spec(), disk_mb=1 << 40)  # a 1 EiB image
    with pytest.raises(BackendError, match="cannot make a .* MB disk"):
        provision(conn, facts, too_big, base, INSTANCE)
    state = {"sandbox_id": too_big.sandbox_id, "dir": f"{base}/{too_big.sandbox_id}",
             "user": layout.user_name(too_big.sandbox_id)}  # fmt: skip
    assert left_of(conn, state) == []


# -- GPUs: the device nodes of the sandbox's GPUs, and only those ------------------------------

STAND_INS = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]
FAKE_SMI = Path(__file__).resolve().parents[1] / "bin" / "nvidia-smi"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


@pytest.fixture
def stand_in_gpus() -> Iterator[None]:
    """Two GPUs' device nodes as a driver makes them, stood in for by character devices of
    /dev/null's numbers (harmless to open); skipped on a machine with a real GPU driver."""
    if any(os.path.exists(path) for path in STAND_INS):
        pytest.skip("this machine has NVIDIA device nodes of its own")
    try:
        for path in STAND_INS:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            os.chmod(path, 0o666)
        yield
    finally:
        for path in STAND_INS:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def test_a_gpu_sandbox_gets_its_own_gpus_device_nodes_only(sudo_isolated, base, stand_in_gpus):
    conn, facts = sudo_isolated
    state = provision(conn, facts, helpers.spec(gpus=(1,)), base, INSTANCE)
    other = provision(conn, facts, helpers.spec(), base, INSTANCE)
    try:
        seen = sh(conn, layout.as_sandbox(state, "ls /dev | grep nvidia", own_env=True))
        assert seen.split() == ["nvidia-uvm", "nvidia1", "nvidiactl"]
        said = sh(conn, layout.as_sandbox(state, "echo $CUDA_VISIBLE_DEVICES", own_env=True))
        assert said.strip() == "1"
        # The host's tools are there, read-only: nvidia-smi (here the fake, on H100 fixtures).
        fields = "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total"
        query = f"--query-gpu={fields},temperature.gpu,power.draw --format=csv,noheader,nounits"
        # Copied into the workspace: the checkout may lie where the sandbox has its own
        # (/tmp is private), and the host's tools are what a GPU sandbox runs.
        ws = f"{state['dir']}/workspace"
        sh(
            conn,
            f"cp -r {FAKE_SMI.parent} {FIXTURES} {ws}/ && chown -R {state['uid']} {ws}",
            root=True,
        )
        fake = (
            f"FAKE_NVIDIA_SMI_STATE=idle,busy FAKE_NVIDIA_SMI_FIXTURES=/workspace/{FIXTURES.name}"
        )
        smi = f"{fake} /workspace/{FAKE_SMI.parent.name}/{FAKE_SMI.name} {query}"
        rows = sh(conn, layout.as_sandbox(state, smi)).splitlines()
        assert [row.split(", ")[2] for row in rows] == ["NVIDIA H100 80GB HBM3"] * 2
        none = conn.run(layout.as_sandbox(other, "ls /dev | grep nvidia"), timeout=30)
        assert none.exit_code == 1 and none.stdout == b""  # a sandbox without GPUs: none
    finally:
        destroy(conn, state)
        destroy(conn, other)
