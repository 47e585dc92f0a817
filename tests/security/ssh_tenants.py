"""The stage of the SSH isolation tests (test_ssh_isolation.py, issue 23): two teams' sandboxes
on ONE SSH host (a real sshd on loopback, tests/ssh/sshd.py) whose login user may `sudo -n`,
so every sandbox runs as a Unix user of its own. Not a test module.

- `IsolationHost`: the shared host as an admin adds it (every team may use it, the only
  enabled host), the sandboxes made on it through the services and their removal, and, when
  the module ends, whatever a failed run left (the sandboxes' users and processes, files);
- PROBE: one stdlib program the tests put into a sandbox (`python3 isoprobe.py <what> ...`):
  connections, what the sandbox sees of other processes, memory and CPU hogs, the destroy
  race's exchange loop; each prints one JSON document;
- `HostListener`: a TCP listener in the test process (on loopback or on 0.0.0.0) that records
  who connected;
- `host_pid_of`: the host's pid of a sandbox's process, found by a token in its argv.

Every address a test connects to is this machine's: its loopback, its own interfaces, or a
Docker sandbox on it. Secrets are handed to a sandbox in files (write_file), never in the argv
of the command that looks for them, so a command never finds its own argv.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hosts.backends import get_backend, reset_backends
from hosts.backends.ssh.backend import SshBackend
from hosts.models import Host
from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.results import CommandResult
from sandboxes.models import Sandbox
from tenants.models import Team
from tenants.principal import Principal
from tests.leftovers import remove_sandboxes_under
from tests.live import World
from tests.ssh.helpers import register
from tests.ssh.logins import SUDO_USER
from tests.ssh.sshd import Sshd

PROBE_NAME = "isoprobe.py"

# Run inside a sandbox as `python3 isoprobe.py <what> ...`; prints one JSON document.
PROBE = (Path(__file__).with_name(PROBE_NAME)).read_text()


# -- the shared host and the two teams' sandboxes ------------------------------------------------


@dataclass
class IsolationHost:
    """The shared SSH host and the sandboxes the module made on it through the services."""

    host: Host
    world: World
    made: list[tuple[Principal, str]] = field(default_factory=list)

    @property
    def alice(self) -> Principal:  # team A
        return self.world.principal()

    @property
    def bob(self) -> Principal:  # team B
        return Principal(user=self.world.bob, team=self.world.team_b, channel="web")

    def backend(self) -> SshBackend:
        backend = get_backend(self.host)
        assert isinstance(backend, SshBackend)
        return backend

    def create(self, principal: Principal, **options: Any) -> str:
        """A sandbox of the principal's team on the shared host, with PROBE in its workspace."""
        info = services.create_sandbox(principal, **options)
        self.made.append((principal, info.id))
        assert info.host == self.host.name, info
        state = self.state(info.id)
        assert state["own_user"] is True, state  # a Unix user of its own, through sudo
        services.write_file(principal, info.id, PROBE_NAME, PROBE)
        return info.id

    def state(self, sandbox_id: str) -> dict[str, Any]:
        return Sandbox.objects.get(public_id=sandbox_id).backend_state

    def delete_all(self) -> None:
        for principal, sandbox_id in reversed(self.made):
            if Sandbox.objects.get(public_id=sandbox_id).status != "deleted":
                with contextlib.suppress(Exception):
                    services.delete_sandbox(principal, sandbox_id)
        self.made.clear()


@contextlib.contextmanager
def isolation_host(world: World, server: Sshd) -> Iterator[IsolationHost]:
    """The server as a host shared by every team, its login user allowed `sudo -n` (a Unix
    user per sandbox), the only enabled host; both teams may have network and many sandboxes.
    On exit: the sandboxes deleted, then whatever a failed run left of them (users, processes,
    files) removed."""
    workdir = Path(tempfile.mkdtemp(prefix="sandhub-iso-", dir="/var/tmp"))
    workdir.chmod(0o777)
    Host.objects.filter(kind=Host.Kind.DOCKER).update(enabled=False)
    Team.objects.filter(pk__in=[world.team_a.pk, world.team_b.pk]).update(
        allow_network=True, max_running_sandboxes=20
    )
    for team in (world.team_a, world.team_b):
        team.refresh_from_db()
    reset_backends()
    try:
        host = register(server, "iso-ssh", SUDO_USER, workdir / "base")
        assert host.per_sandbox_users and host.team is None
        stage = IsolationHost(host=host, world=world)
        try:
            yield stage
        finally:
            stage.delete_all()
            Host.objects.filter(pk=host.pk).update(enabled=False)
    finally:
        reset_backends()
        remove_leftovers(workdir)


def remove_leftovers(workdir: Path) -> None:
    """What a failed run left under workdir, removed as destroy removes it (tests/leftovers.py:
    processes, cgroups, disks, egress rules, users), then workdir."""
    remove_sandboxes_under(workdir)
    shutil.rmtree(workdir, ignore_errors=True)


# -- running things in a sandbox -----------------------------------------------------------------


def run(principal: Principal, sandbox_id: str, command: str, timeout: float = 60) -> CommandResult:
    return services.run_command(principal, sandbox_id, command, timeout=timeout)


def probe(principal: Principal, sandbox_id: str, *args: object, timeout: float = 60) -> Any:
    """PROBE's answer (JSON) to `python3 isoprobe.py args...` in the sandbox."""
    words = " ".join(str(a) for a in args)
    result = run(principal, sandbox_id, f"python3 {PROBE_NAME} {words}", timeout=timeout)
    assert result.exit_code == 0, f"isoprobe {words}: {result}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    """check()'s first true answer, polled until the deadline."""
    give_up = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        assert time.monotonic() < give_up, f"gave up after {timeout:.0f} s waiting for {what}"
        time.sleep(0.1)


# -- this machine --------------------------------------------------------------------------------


class HostListener:
    """A TCP listener of the test process on `address` (a free port), recording the peer
    address of every connection it accepts."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.peers: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, peer = self.sock.accept()
                self.peers.append(peer[0])
                conn.close()

    def close(self) -> None:
        self.sock.close()


# Bridges and veths that Docker sandboxes (this run's, or a concurrent run's) make and remove:
# an address of one that is gone by the time a sandbox connects would lead off this machine.
TRANSIENT_INTERFACES = ("sbx-", "br-", "veth")


def host_addresses() -> list[str]:
    """This machine's lasting IPv4 addresses but loopback: its interfaces and docker0 (the
    Docker bridges' gateway)."""
    output = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in output.splitlines():
        interface, address = line.split()[1], line.split()[3].split("/")[0]
        if not address.startswith("127.") and not interface.startswith(TRANSIENT_INTERFACES):
            found.append(address)
    assert found, f"no address of this machine but loopback: {output}"
    return found


def host_pid_of(token: str, program: str = "python3") -> int | None:
    """The host's pid of the process running `program` with `token` among its arguments (the
    process itself: not a shell or wrapper that carries the same words)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (
            state != "Z"
            and os.path.basename(argv[0]).decode(errors="replace").startswith(program)
            and token.encode() in argv
        ):
            return int(entry.name)
    return None


def running_on_host(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@dataclass
class Pair:
    """Team A's sandbox and team B's on the shared host, both with network; B was created
    with a secret in its environment."""

    stage: IsolationHost
    a: str
    b: str
    b_create_secret: str


def stop_quietly(principal, sandbox_id: str, *, port: int | None = None, job: int | None = None):
    with contextlib.suppress(ServiceError):
        if port is not None:
            services.stop_app(principal, sandbox_id, port)
        if job is not None:
            services.cancel_background(principal, sandbox_id, job)
