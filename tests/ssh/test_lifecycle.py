"""Pause, resume, stop and start of sandboxes on a real sshd with real sudo (ssh/suspend.py):
an isolated sandbox's cgroup frozen and thawed with its processes and memory kept; stopped
with every process ended and its files and disk image kept; started again with its
namespaces, cgroup, disk mount and egress rule made anew; destroyed from stopped with
nothing left. A host that does not isolate answers Unsupported, saying why."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.base import SandboxSpec, Unsupported
from hosts.backends.ssh.backend import SshBackend
from hosts.models import Credential, Host
from tests.leftovers import remove_sandboxes_under
from tests.ssh.helpers import make_backend
from tests.ssh.logins import PLAIN_USER
from tests.ssh.sshd import Sshd
from tests.ssh.test_isolated import cgroup_dirs, egress_policy, left_of, processes

pytestmark = pytest.mark.sshd


@pytest.fixture
def backend(sshd: Sshd, base_dir: str, sudo_for_test_user: None) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=True, name="suspend-box")
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
        "disk_mb": 64,
    }
    return SandboxSpec(**{**values, **changes})


def run(backend: SshBackend, state: dict[str, Any], script: str) -> str:
    result = backend.exec(
        state, ["sh", "-c", script], cwd="/workspace", env={}, timeout=30, output_cap=1 << 20
    )
    assert result.exit_code == 0, result.stderr.decode()
    return result.stdout.decode()


def frozen(sandbox_id: str) -> bool:
    states = []
    for directory in cgroup_dirs(sandbox_id):
        if (directory / "freezer.state").exists():
            states.append((directory / "freezer.state").read_text().strip() == "FROZEN")
        elif (directory / "cgroup.events").exists():
            states.append("frozen 1" in (directory / "cgroup.events").read_text())
    return bool(states) and all(states)


def egress_rule(uid: int) -> bool:
    rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True)
    return f"--uid-owner {uid} -j SANDHUB-EGRESS" in rules.stdout


def test_pause_freezes_the_cgroup_and_resume_goes_on(backend: SshBackend) -> None:
    state = backend.provision(spec())
    try:
        run(backend, state, "echo kept > /tmp/in-memory")
        job = backend.start_background(
            state, ["sh", "-c", "sleep 600"], cwd="/workspace", env={}, job_id="holder-1"
        )
        backend.pause(state)
        backend.pause(state)  # again: nothing more to do
        assert frozen(state["sandbox_id"]) and backend.status(state) == "paused"
        assert processes(state["sandbox_id"])  # frozen, not ended
        backend.resume(state)
        assert not frozen(state["sandbox_id"]) and backend.status(state) == "running"
        assert run(backend, state, "cat /tmp/in-memory") == "kept\n"
        assert backend.poll_background(state, job, 0).running
    finally:
        backend.destroy(state)
    assert left_of(backend.connection(), state) == []


def test_stop_ends_everything_keeps_the_files_and_start_makes_it_again(
    backend: SshBackend,
) -> None:
    state = backend.provision(spec(network=True, egress=egress_policy()))
    conn = backend.connection()
    try:
        run(backend, state, "echo survives > /workspace/notes.txt; echo gone > /tmp/scratch")
        backend.start_background(
            state, ["sh", "-c", "sleep 600"], cwd="/workspace", env={}, job_id="holder-2"
        )
        backend.pause(state)
        backend.stop(state)  # from paused: thawed to be killed
        assert backend.status(state) == "stopped"
        assert cgroup_dirs(state["sandbox_id"]) == [] and not egress_rule(state["uid"])
        ps = subprocess.run(["ps", "-o", "pid=", "-u", str(state["uid"])], capture_output=True)
        assert ps.stdout.strip() == b""
        assert Path(state["dir"], "disk.img").exists()
        assert f"{state['dir']}/workspace" not in Path("/proc/mounts").read_text()
        backend.stop(state)  # again: nothing more to do

        backend.start(state)
        assert backend.status(state) == "running" and egress_rule(state["uid"])
        assert run(backend, state, "cat notes.txt; ls /tmp") == "survives\n"
        links = run(backend, state, "tail -n +3 /proc/net/dev | cut -d: -f1").split()
        assert sorted(links) == ["lo", "tap0"]  # its own namespace and user-mode network
        df = run(backend, state, "df -m /workspace | tail -1")
        assert int(df.split()[1]) <= 64, df  # its own disk, mounted again
        backend.start(state)  # running already: nothing more to do

        backend.stop(state)
    finally:
        backend.destroy(state)  # from stopped: nothing left
    assert left_of(conn, state) == []


def test_a_host_that_does_not_isolate_says_so(server: Sshd) -> None:
    # The login user that may not sudo: its sandboxes share it, with no cgroup of their own.
    key = server.client_keys["ed25519"]
    credential = Credential(name="nosudo", kind=Credential.Kind.PRIVATE_KEY, username=PLAIN_USER)
    credential.set_secret(key.text)
    base = f"/var/tmp/sandhub-suspend-test-{secrets.token_hex(4)}"
    host = Host(
        name="nosudo-box",
        kind="ssh",
        endpoint=f"{server.address}:{server.port}",
        credential=credential,
        base_dir=base,
        host_key_pinned=server.fingerprint,
        host_key_type="ssh-ed25519",
    )
    plain = SshBackend(host)
    state = plain.provision(spec())
    try:
        assert state["isolated"] is False
        for operation in (plain.pause, plain.stop, plain.resume, plain.start):
            with pytest.raises(Unsupported, match="does not isolate sandboxes"):
                operation(state)
        assert run(plain, state, "echo still here") == "still here\n"
    finally:
        plain.destroy(state)
        plain.close()
        remove_sandboxes_under(Path(base))
        shutil.rmtree(base, ignore_errors=True)
