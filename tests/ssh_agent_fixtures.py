"""Fixtures and helpers of the SSH agent tests (test_ssh_agent.py, test_ssh_agent_transfers.py),
against a real OpenSSH server on loopback (tests/sshd.py). Not a test module.

Sandboxes are made and removed by provision.provision / destroy under a base directory of
the test module's own: as the shared login user, or with their own Unix user, run through
`sudo -n -u` (the login user may then sudo while the module runs). Processes are looked for
with `ps` over a connection of their own.
"""

from __future__ import annotations

import io
import os
import pwd
import secrets
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import JobStatus, SandboxSpec
from hosts.backends.ssh.agent import agent_link
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.hostprobe import HostFacts
from hosts.backends.ssh.pool import ConnectionPool
from hosts.backends.ssh.provision import destroy, provision
from tests.sshd import Sshd

SUDOERS = Path("/etc/sudoers.d/sandhub-test-agent")
LIMITS: dict[str, Any] = {"memory_mb": 4096, "cpus": 2.0, "pids": 4096}
CAP = 64 * 1024

# -- sandboxes and links -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_dir() -> Iterator[str]:
    path = f"/var/tmp/sandhub-agent-test-{secrets.token_hex(4)}"  # provision makes it
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def conns() -> Iterator[ConnectionPool]:
    pool = ConnectionPool()
    yield pool
    pool.close_all()


def new_link(sshd: Sshd, conns: ConnectionPool) -> AgentLink:
    target = sshd.target()
    return agent_link(lambda: conns.get(target))


@pytest.fixture
def link(sshd: Sshd, conns: ConnectionPool) -> Iterator[AgentLink]:
    agents = new_link(sshd, conns)
    yield agents
    agents.close()


@pytest.fixture
def make_sandbox(
    sshd: Sshd, conns: ConnectionPool, base_dir: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., dict[str, Any]]]:
    """Sandboxes made and removed by provision.provision / destroy (helper A's), sharing the
    login user, or with their own user (then the login user may sudo while the module runs)."""
    made: list[dict[str, Any]] = []
    target = sshd.target()

    def make(*, own_user: bool = False) -> dict[str, Any]:
        if own_user:
            request.getfixturevalue("sudo_for_test_user")
        facts = HostFacts(
            login_user=sshd.username,
            uid=pwd.getpwnam(sshd.username).pw_uid,
            sudo=own_user,
            systemd=False,
            python3="3",
            tools=("useradd", "userdel", "setpriv"),
        )
        spec = SandboxSpec(
            sandbox_id="sb_" + secrets.token_hex(6),
            image_reference="",
            cpus=LIMITS["cpus"],
            memory_mb=LIMITS["memory_mb"],
            pids_limit=LIMITS["pids"],
            network=True,
            env={"SANDBOX_VAR": "from-the-sandbox"},
        )
        state = provision(conns.get(target), facts, spec, base_dir, "sandhub-agent-test")
        made.append(state)
        return state

    yield make
    for state in made:
        destroy(conns.get(target), state, base_dir=base_dir)
        assert not os.path.exists(state["dir"])


@pytest.fixture
def sandbox(make_sandbox: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return make_sandbox()


def run(link: AgentLink, state: dict[str, Any], script: str, **options: Any) -> Any:
    options = {"cwd": "/workspace", "env": {}, "timeout": 30, "output_cap": CAP, **options}
    return link.exec(state, ["sh", "-c", script], **options)


def remote_processes(sshd: Sshd, needle: str) -> list[str]:
    """Command lines holding `needle`, as `ps` on the host sees them over a new connection."""
    with SshConnection(sshd.target()) as conn:
        listing = conn.run("ps -eo pid=,stat=,args=", timeout=10).stdout.decode()
    return [
        line
        for line in listing.splitlines()
        if needle in line and "ps -eo" not in line and line.split()[1][:1] != "Z"
    ]


def wait_for(check: Callable[[], bool], timeout: float = 20, what: str = "") -> None:
    give_up = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < give_up, f"gave up waiting for {what or check}"
        time.sleep(0.05)


def make_tar(files: dict[str, bytes], modes: dict[str, int] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            info.mode = (modes or {}).get(name, 0o644)
            archive.addfile(info, io.BytesIO(content))
    return out.getvalue()


def untar(chunks: Iterator[bytes]) -> dict[str, bytes]:
    found = {}
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r:") as archive:
        for member in archive:
            if member.isfile():
                handle = archive.extractfile(member)
                assert handle is not None
                found[member.name] = handle.read()
    return found


def poll_until_done(jobs: AgentJobs, state: dict[str, Any], job: dict[str, Any]) -> JobStatus:
    give_up = time.monotonic() + 30
    while True:
        status = jobs.poll_background(state, job, 4096)
        if not status.running:
            return status
        assert time.monotonic() < give_up, status
        time.sleep(0.05)


@pytest.fixture(scope="module")
def sudo_for_test_user(sshd: Sshd) -> Iterator[None]:
    SUDOERS.write_text(f"{sshd.username} ALL=(ALL) NOPASSWD: ALL\n")
    SUDOERS.chmod(0o440)
    subprocess.run(["visudo", "-cf", str(SUDOERS)], check=True, capture_output=True)
    yield
    SUDOERS.unlink(missing_ok=True)
