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
from sandboxes.contract.results import CommandResult
from sandboxes.models import Sandbox
from tenants.models import Team
from tenants.principal import Principal
from tests.live import World
from tests.ssh.helpers import register
from tests.ssh.logins import SUDO_USER
from tests.ssh.sshd import Sshd

PROBE_NAME = "isoprobe.py"

# Run inside a sandbox as `python3 isoprobe.py <what> ...`; prints one JSON document.
PROBE = r'''
import concurrent.futures, ctypes, errno, json, os, platform, signal, socket, subprocess, sys
import time, urllib.request


def tcp(timeout, *targets):
    """Each host:port: "connected", or how the connection failed."""
    def one(target):
        host, port = target.rsplit(":", 1)
        started = time.monotonic()
        try:
            socket.create_connection((host, int(port)), timeout=float(timeout)).close()
            return "connected"
        except OSError as exc:
            took = time.monotonic() - started
            return f"failed {type(exc).__name__} errno={exc.errno} after {took:.2f}s"
    with concurrent.futures.ThreadPoolExecutor(max(1, len(targets))) as pool:
        return dict(zip(targets, pool.map(one, targets)))


def http(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return {"ok": True, "body": answer.read(4096).decode("utf-8", "replace")}
    except OSError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def unix(name):
    """Connect to the abstract Unix socket @name and read what it says."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect("\0" + name)
        return {"ok": True, "said": sock.recv(4096).decode("utf-8", "replace")}
    except OSError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        sock.close()


def serve_abstract(name, text):
    """Listen on the abstract Unix socket @name; tell each caller `text`. Runs until killed."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("\0" + name)
    sock.listen(16)
    print("listening", flush=True)
    while True:
        conn, _ = sock.accept()
        with conn:
            conn.sendall(text.encode())


def view(needles_file):
    """What this sandbox sees of the host's processes: the needles (one per line of the file)
    wherever `ps -eo pid,user,args` or /proc/*/cmdline or /proc/*/environ shows them, and
    every process whose owner is not this sandbox's user."""
    with open(needles_file) as handle:
        needles = [line.strip() for line in handle if line.strip()]
    hits = {str(i): [] for i in range(len(needles))}
    try:
        listing = subprocess.run(["ps", "-eo", "pid=,user=,args="], capture_output=True,
                                 text=True).stdout
    except FileNotFoundError:  # no ps in the sandbox: it shows nothing
        listing = ""
    for i, needle in enumerate(needles):
        if needle in listing:
            hits[str(i)].append("ps -eo pid,user,args")
    me, others, seen = os.getuid(), [], 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as handle:
                status = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            continue
        seen += 1
        uid = int(status["Uid"].split()[0])
        if uid != me:
            others.append([int(entry), uid, status["Name"].strip()])
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{part}", "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            for i, needle in enumerate(needles):
                if needle.encode() in data:
                    hits[str(i)].append(f"/proc/{entry}/{part}")
    users = sorted({line.split()[1] for line in listing.splitlines() if len(line.split()) > 1})
    others.sort()
    return {"uid": me, "processes": seen, "others": others[:40], "others_count": len(others),
            "ps_users": users[:40], "hits": hits}


def kill(pid):
    """kill(pid, 0) and kill(pid, SIGKILL): what each said."""
    said = {}
    for name, signum in (("probe", 0), ("kill", signal.SIGKILL)):
        try:
            os.kill(int(pid), signum)
            said[name] = "delivered"
        except OSError as exc:
            said[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    return said


def hog(count, megabytes, hold_seconds):
    """`count` processes each allocating and touching `megabytes` MiB, then holding it until
    a common moment `hold_seconds` after the start: the exit status of each (0: it held its
    memory at that moment; negative: killed by that signal; 3: done allocating too late)."""
    count, size = int(count), int(megabytes) * 2**20
    until = time.monotonic() + float(hold_seconds)
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                block = bytearray(size)
                for at in range(0, size, 4096):
                    block[at] = 1
                code = 3 if time.monotonic() > until else 0
                time.sleep(max(0.0, until - time.monotonic()))
            finally:
                os._exit(code)
        children.append(pid)
    statuses = []
    for pid in children:
        _, status = os.waitpid(pid, 0)
        statuses.append(os.waitstatus_to_exitcode(status))
    return {"statuses": statuses}


def burn(count, seconds):
    """`count` busy loops for `seconds` of wall time: the CPU seconds they got, and the wall."""
    count, seconds = int(count), float(seconds)
    started = time.monotonic()
    for _ in range(count):
        if os.fork() == 0:
            while time.monotonic() - started < seconds:
                pass
            os._exit(0)
    for _ in range(count):
        os.wait()
    wall = time.monotonic() - started
    times = os.times()
    return {"cpu": times.children_user + times.children_system, "wall": wall}


def _renameat2():
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        call = libc.renameat2
        def exchange(a, b):
            return call(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
    except AttributeError:  # a libc without the wrapper: the system call itself
        number = {"x86_64": 316, "aarch64": 276}[platform.machine()]
        def exchange(a, b):
            return libc.syscall(number, -100, a, -100, b, 2)
    return exchange


def race(seconds, target, tag, *roots):
    """The attacker's side of the destroy race: in each root, a directory of its own
    (ROOT/race-TAG, open to everyone) and a symlink beside it (ROOT/race-TAG.link -> target),
    swapped with renameat2(RENAME_EXCHANGE) over and over for `seconds`."""
    exchange, pairs = _renameat2(), []
    for root in roots:
        here, link = f"{root}/race-{tag}", f"{root}/race-{tag}.link"
        try:
            os.mkdir(here)
            os.chmod(here, 0o777)
            os.symlink(target, link)
        except OSError as exc:
            print(f"{root}: {exc}", file=sys.stderr, flush=True)
            continue
        pairs.append((here.encode(), link.encode()))
    print("racing", len(pairs), flush=True)
    swaps, failures, until = 0, 0, time.monotonic() + float(seconds)
    while pairs and time.monotonic() < until:
        for _ in range(1000):
            for here, link in pairs:
                if exchange(here, link) == 0:
                    swaps += 1
                else:
                    failures += 1
    return {"pairs": len(pairs), "swaps": swaps, "failures": failures}


def plant(tag, name, *roots):
    """The destroyed sandbox's side: its own file NAME inside the attacker's directory
    ROOT/race-TAG (created only while that name is the directory, never through the link)."""
    planted = {}
    for root in roots:
        here = f"{root}/race-{tag}"
        if not os.path.lexists(here):
            planted[root] = "absent"
            continue
        planted[root] = "not planted"
        until = time.monotonic() + 2
        while time.monotonic() < until:
            try:
                fd = os.open(f"{here}/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | os.O_NOFOLLOW, 0o644)
            except OSError:
                continue
            os.close(fd)
            planted[root] = "planted"
            break
    return planted


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    print(json.dumps(globals()[what](*args)), flush=True)
'''


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
    """The sandbox users whose homes lie under workdir, their processes, whatever is mounted
    under workdir (a sandbox's own disk), and workdir."""
    passwd = subprocess.run(["getent", "passwd"], capture_output=True, text=True).stdout
    for line in passwd.splitlines():
        name, home = line.split(":")[0], line.split(":")[5]
        if name.startswith("sbx-") and home.startswith(f"{workdir}/"):
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            subprocess.run(["userdel", name], capture_output=True)
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    points = [line.split()[1] for line in mounts if len(line.split()) > 1]
    for point in sorted(points, key=len, reverse=True):
        if point.startswith(f"{workdir}/"):
            subprocess.run(["umount", "-l", point], capture_output=True)
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
