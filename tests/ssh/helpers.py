"""Helpers of the SSH tests (fixtures: tests/ssh/conftest.py and, for the `server` of the
two login users, tests/conftest.py), against a real OpenSSH server on loopback
(tests/ssh/sshd.py). Not a test module.

Sandboxes are made and removed by provision.provision / destroy under a base directory of
the test module's own: as the shared login user, or with their own Unix user, run through
`sudo -n -u` (the login user may then sudo while the module runs). Processes are looked for
with `ps` over a connection of their own.
"""

from __future__ import annotations

import io
import secrets
import shlex
import string
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hosts.backends import reset_backends
from hosts.backends.agent.jobs import AgentJobs
from hosts.backends.agent.link import AgentLink
from hosts.backends.base import JobStatus, SandboxSpec
from hosts.backends.ssh import layout
from hosts.backends.ssh.agent import agent_link
from hosts.backends.ssh.backend import SshBackend
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.pool import ConnectionPool
from hosts.models import Credential, Host
from sandboxes import services
from tenants.models import Team
from tenants.principal import Principal
from tests.ssh.logins import SUDO_USER
from tests.ssh.sshd import Sshd

LIMITS: dict[str, Any] = {"memory_mb": 4096, "cpus": 2.0, "pids": 4096}
CAP = 64 * 1024
# A python that is not installed: what a host without python3 looks like to the backend's
# agent link (its start fails with exit 127 -> AgentUnavailable), so calls go the plain way.
ABSENT_PYTHON = "python3-absent"
INSTANCE = "test-instance"
SYSTEM = Principal.system()

# -- the agent and the backend on the test sshd's shared login user ---------------------------


def new_link(sshd: Sshd, conns: ConnectionPool) -> AgentLink:
    target = sshd.target()
    return agent_link(lambda: conns.get(target))


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


# -- sandboxes made by provision, as either login user of tests/ssh/logins.py -------------


def new_id(prefix: str = "sb_") -> str:
    alphabet = string.ascii_lowercase + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(12))


def spec(sandbox_id: str | None = None, gpus: tuple[int, ...] = ()) -> SandboxSpec:
    return SandboxSpec(sandbox_id=sandbox_id or new_id(), image_reference="", cpus=1.5,
                       memory_mb=512, pids_limit=200, network=False,
                       env={"GREETING": "hi there"}, gpus=gpus)  # fmt: skip


def sh(conn: SshConnection, command: str, *, root: bool = False) -> str:
    if root:
        command = f"sudo -n /bin/sh -c {shlex.quote(command)}"
    result = conn.run(command, timeout=30)
    assert result.ok, (command, result)
    return result.stdout.decode()


def modes(conn: SshConnection, *paths: str, root: bool = True) -> list[str]:
    """`mode owner group` of each path, read on the host (by root, or the login user)."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    return sh(conn, f"stat -c '%a %U %G' {quoted}", root=root).splitlines()


def alive(conn: SshConnection, pid: int) -> bool:
    """Running (not a zombie: this machine's init does not reap orphans)."""
    state = conn.run(f"ps -o stat= -p {pid}", timeout=10).stdout.decode().strip()
    return bool(state) and not state.startswith("Z")


def start_detached(conn: SshConnection, state: dict) -> int:
    """A double-forked sleep of the sandbox, out of its session and ignoring hang-ups."""
    line = "setsid nohup sleep 1000 >/dev/null 2>&1 & echo $!"
    return int(sh(conn, layout.as_sandbox(state, line)).strip())


def user_exists(conn: SshConnection, name: str) -> bool:
    return conn.run(f"id -u {name}", timeout=10).ok


def timed(call, *args, **kwargs):
    started = time.perf_counter()
    result = call(*args, **kwargs)
    return result, f"{(time.perf_counter() - started) * 1000:.0f} ms"


# -- SSH hosts as an admin adds them --------------------------------------------------------


def register(sshd: Sshd, name: str, user: str, base_dir: Path, team: Team | None = None) -> Host:
    """An SSH host as an admin adds it: credential, key fetched and confirmed, probed."""
    credential = Credential(name=name, kind=Credential.Kind.PRIVATE_KEY, username=user)
    credential.set_secret(sshd.client_keys["ed25519"].text)
    credential.save()
    host = Host.objects.create(name=name, kind=Host.Kind.SSH, credential=credential,
                               endpoint=f"{sshd.address}:{sshd.port}", base_dir=str(base_dir),
                               team=team)  # fmt: skip
    seen = services.fetch_host_key(SYSTEM, host.pk)
    assert seen.fingerprint == sshd.fingerprint
    services.confirm_host_key(SYSTEM, host.pk, seen.fingerprint)
    assert services.probe_host(SYSTEM, host.pk).healthy
    host.refresh_from_db()
    return host


def host_on(server: Sshd, workdir: Path, settings: Any, docker_host: Host) -> Iterator[Host]:
    """The server as the one enabled host (the Docker host disabled), logging in as the sudo
    user, its key not yet pinned (the `ssh_host` fixture, tests/ssh/conftest.py)."""
    settings.SANDHUB_BACKENDS = {
        "docker": "tests.fakes.FakeBackend",
        "ssh": "hosts.backends.ssh.backend.SshBackend",
    }
    Host.objects.filter(pk=docker_host.pk).update(enabled=False)  # only the SSH host
    key = server.client_keys["ed25519"]
    credential = Credential(name="gpu-box", kind=Credential.Kind.PRIVATE_KEY, username=SUDO_USER)
    credential.set_secret(key.text)
    credential.save()
    host = Host.objects.create(
        name="gpu-box",
        kind="ssh",
        endpoint=f"{server.address}:{server.port}",
        credential=credential,
        base_dir=str(workdir / "base"),
    )
    reset_backends()
    yield host
    reset_backends()


def make_backend(
    sshd: Sshd,
    base_dir: str,
    *,
    agent: bool,
    name: str = "ports-box",
    username: str | None = None,
    options: dict[str, Any] | None = None,
) -> SshBackend:
    """SshBackend on the test's sshd (unsaved Host and Credential: no database needed), logging
    in as `username` (default: the sshd's user), with the host's `options`; without the agent,
    as a host without python3 looks to the backend."""
    key = sshd.client_keys["ed25519"]
    login = username or sshd.username
    credential = Credential(name=name, kind=Credential.Kind.PRIVATE_KEY, username=login)
    credential.set_secret(key.text)
    host = Host(
        name=name,
        kind="ssh",
        endpoint=f"{sshd.address}:{sshd.port}",
        credential=credential,
        base_dir=base_dir,
        host_key_pinned=sshd.fingerprint,
        host_key_type="ssh-ed25519",
        options=options or {},
    )
    ssh = SshBackend(host)
    if not agent:
        ssh.place.python = ABSENT_PYTHON
    return ssh
