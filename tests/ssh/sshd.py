"""A real OpenSSH server on loopback for tests (not a test module).

    with running_sshd() as server:          # or the `sshd` fixture (tests/ssh/conftest.py)
        conn = SshConnection(server.target("ed25519"))

Each `Sshd` is its own `/usr/sbin/sshd -D` on 127.0.0.1 and a free port, with host keys
(Ed25519 and RSA) and client keys made for it in a temporary directory, logging in as one
Unix user shared by all instances (`sandhub-ssh-test`, created once and kept). Its password
is random, made on this machine once and kept in a root-only file, never in the repository.
Needs root (CI runs as root; `.ci/run` installs openssh-server). A missing sshd FAILS the
test: nothing is skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hosts.backends.ssh.connection import SshTarget

SSHD = "/usr/sbin/sshd"
TEST_USER = "sandhub-ssh-test"
STATE_DIR = Path("/var/lib/sandhub-ssh-test")  # the user's password, and a lock
LOGINS = ("ed25519", "rsa", "ecdsa", "ed25519-passphrase", "password")
_PR_SET_PDEATHSIG = 1  # prctl(2)
_user_password: str | None = None  # per process, once the user is set up


class SshdUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class ClientKey:
    name: str
    path: Path
    text: str  # the private key file's content
    passphrase: str | None
    public_line: str  # "ssh-ed25519 AAAA... comment"


def _run(*argv: str, stdin: str | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SshdUnavailable(f"{' '.join(argv[:3])} failed: {done.stderr.strip()}")
    return done.stdout


def ensure_test_user() -> tuple[str, str]:
    """(user, password) of the shared test login, creating the user if missing."""
    global _user_password
    if _user_password is None:
        if os.geteuid() != 0:
            raise SshdUnavailable("the SSH tests run sshd and create a Unix user: run as root")
        STATE_DIR.mkdir(mode=0o700, exist_ok=True)
        # Other test processes (a CI run, another engineer's tests) may set up the same user
        # at the same time: one at a time, and each finds what the first made.
        with open(STATE_DIR / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _user_password = _set_up_user()
    return TEST_USER, _user_password


def _set_up_user() -> str:
    try:
        _run("id", "-u", TEST_USER)
    except SshdUnavailable:
        _run("useradd", "--create-home", "--shell", "/bin/bash", TEST_USER)
    password_file = STATE_DIR / "password"
    if not password_file.exists():
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(24))
    password = password_file.read_text().strip()
    _run("chpasswd", stdin=f"{TEST_USER}:{password}\n")
    return password


def _keygen(path: Path, key_type: str, *extra: str, passphrase: str = "") -> None:
    for stale in (path, path.with_suffix(".pub")):
        stale.unlink(missing_ok=True)
    bits = ["-b", "2048"] if key_type == "rsa" else []
    _run("ssh-keygen", "-q", "-t", key_type, *bits, *extra, "-N", passphrase, "-C",
         f"sandhub-test-{path.name}", "-f", str(path))  # fmt: skip


def keygen_fingerprint(public_key_path: Path) -> str:
    """`ssh-keygen -lf`'s SHA256 fingerprint of a public key file (the reference)."""
    match = re.search(r"SHA256:[A-Za-z0-9+/]+", _run("ssh-keygen", "-lf", str(public_key_path)))
    assert match, f"no fingerprint from ssh-keygen -lf {public_key_path}"
    return match.group(0)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def descendants(root: int) -> list[int]:
    """Pids of every process below `root`, from /proc (sshd's sessions and their commands)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # The command name may hold spaces or parentheses: the ppid follows the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def wait_gone(pids: list[int], timeout: float) -> None:
    give_up = time.monotonic() + timeout
    for pid in pids:
        while os.path.exists(f"/proc/{pid}") and _is_running(pid):
            if time.monotonic() > give_up:
                raise AssertionError(f"process {pid} of the test sshd outlived SIGKILL")
            time.sleep(0.01)


def _is_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie is dead, waiting for a parent (init) to reap it


def _die_with_parent() -> None:
    # In the child before exec: SIGTERM when the test process dies, even by SIGKILL or a
    # timeout, so no sshd outlives the run that started it.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _openssh_version() -> tuple[int, int]:
    done = subprocess.run([SSHD, "-V"], capture_output=True, text=True, timeout=10)
    match = re.search(r"OpenSSH_(\d+)\.(\d+)", done.stdout + done.stderr)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


class Sshd:
    """One sshd instance; see the module docstring."""

    def __init__(self, *, max_sessions: int | None = None) -> None:
        if not os.path.exists(SSHD):
            raise SshdUnavailable(
                f"{SSHD} is missing: install openssh-server (`.ci/run` and `make install` do)"
            )
        self.username, self.password = ensure_test_user()
        self.address = "127.0.0.1"
        self.port = 0
        self.max_sessions = max_sessions
        self.process: subprocess.Popen[bytes] | None = None
        # 0755: sshd reads authorized_keys as the login user.
        self.dir = Path(tempfile.mkdtemp(prefix="sandhub-sshd-"))
        self.dir.chmod(0o755)
        self.log_path = self.dir / "sshd.log"
        self.config_path = self.dir / "sshd_config"
        self.host_fingerprints: dict[str, str] = {}  # "ssh-ed25519" / "ssh-rsa" -> SHA256:...
        try:
            (self.dir / "client").mkdir(mode=0o700)
            self.make_host_keys()
            self.client_keys = self._make_client_keys()
            # Not in authorized_keys: a key the server must refuse.
            self.stranger_key = self._client_key("stranger", "ed25519")
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    # -- keys ---------------------------------------------------------------------------------

    def host_key_path(self, key_type: str) -> Path:
        return self.dir / f"ssh_host_{key_type}_key"

    def make_host_keys(self) -> None:
        """(Re)generate the host keys; a running server uses them after a restart."""
        for key_type, name in (("ed25519", "ssh-ed25519"), ("rsa", "ssh-rsa")):
            path = self.host_key_path(key_type)
            _keygen(path, key_type)
            self.host_fingerprints[name] = keygen_fingerprint(path.with_suffix(".pub"))

    @property
    def fingerprint(self) -> str:
        """The Ed25519 host key's fingerprint: the key paramiko's preference gets shown."""
        return self.host_fingerprints["ssh-ed25519"]

    def _make_client_keys(self) -> dict[str, ClientKey]:
        keys = {
            "ed25519": self._client_key("ed25519", "ed25519"),
            # Legacy PEM (PKCS#1) for RSA, OpenSSH format for the others: both loaders run.
            "rsa": self._client_key("rsa", "rsa", "-m", "PEM"),
            "ecdsa": self._client_key("ecdsa", "ecdsa"),
            "ed25519-passphrase": self._client_key(
                "ed25519-passphrase", "ed25519", passphrase=secrets.token_urlsafe(12)
            ),
        }
        authorized = self.dir / "authorized_keys"
        authorized.write_text("".join(key.public_line + "\n" for key in keys.values()))
        authorized.chmod(0o644)
        return keys

    def _client_key(self, name: str, key_type: str, *extra: str, passphrase: str = "") -> ClientKey:
        path = self.dir / "client" / name
        _keygen(path, key_type, *extra, passphrase=passphrase)
        return ClientKey(
            name=name,
            path=path,
            text=path.read_text(),
            passphrase=passphrase or None,
            public_line=path.with_suffix(".pub").read_text().strip(),
        )

    def target(self, login: str = "ed25519", **changes: object) -> SshTarget:
        """A pinned SshTarget for one of LOGINS; `changes` replace fields (a wrong password)."""
        if login == "password":
            target = SshTarget(self.address, self.port, self.username, password=self.password)
        else:
            key = self.client_keys[login]
            target = SshTarget(
                self.address,
                self.port,
                self.username,
                private_key=key.text,
                passphrase=key.passphrase,
            )
        target = dataclasses.replace(target, fingerprint=self.fingerprint)
        return dataclasses.replace(target, **changes)  # type: ignore[arg-type]

    # -- process ------------------------------------------------------------------------------

    def _write_config(self) -> None:
        lines = [
            f"Port {self.port}",
            f"ListenAddress {self.address}",
            *(f"HostKey {self.host_key_path(t)}" for t in ("ed25519", "rsa")),
            "PidFile none",
            "UsePAM no",
            "PasswordAuthentication yes",
            "PubkeyAuthentication yes",
            "KbdInteractiveAuthentication no",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            # The keys live under /tmp (world-writable), which StrictModes would refuse.
            "StrictModes no",
            f"AllowUsers {self.username}",
            "PermitRootLogin no",
            "UseDNS no",
            "PrintMotd no",
            # "Connection from ... port N" for each connection: tests tell theirs apart.
            "LogLevel VERBOSE",
            "Subsystem sftp internal-sftp",
        ]
        if self.max_sessions is not None:
            lines.append(f"MaxSessions {self.max_sessions}")
        if _openssh_version() >= (9, 8):
            # Newer sshd refuses a source for a while after failed logins: the tests fail
            # logins on purpose, all from 127.0.0.1.
            lines.append("PerSourcePenalties no")
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> Sshd:
        """Start sshd (on a new free port the first time, the same port after)."""
        assert self.process is None, "already running"
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        fixed = self.port != 0
        for _ in range(5 if not fixed else 1):
            if not fixed:
                self.port = _free_port()
            self._write_config()
            if self._launch():
                return self
        raise SshdUnavailable(f"sshd did not start on {self.address}:{self.port}: {self.log()}")

    def _launch(self) -> bool:
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.config_path)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        ready = f"Server listening on {self.address} port {self.port}"
        give_up = time.monotonic() + 15
        while time.monotonic() < give_up:
            if ready in self.log(offset):
                return True
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        self._signal_all(signal.SIGKILL)
        return False

    def log(self, offset: int = 0) -> str:
        with contextlib.suppress(FileNotFoundError), open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")
        return ""

    def _signal_all(self, signum: int) -> None:
        """Signal sshd and every process under it (its sessions and their commands)."""
        if self.process is None:
            return
        listener = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(listener, signal.SIGSTOP)  # no new session forks while we look
        tree = descendants(listener)
        for pid in [listener, *tree]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(listener, signal.SIGCONT)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        wait_gone(tree, timeout=10)
        self.process = None

    def stop(self) -> None:
        """Stop sshd and end every session on it (clients see their connection close)."""
        self._signal_all(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL sshd and everything under it, as a crash or power loss would."""
        self._signal_all(signal.SIGKILL)

    def restart(self) -> None:
        """Stop, then start on the same port with the same keys."""
        self.stop()
        self.start()

    def rotate_host_keys(self) -> None:
        """New host keys (as after a reinstall); takes effect now if running."""
        running = self.process is not None
        if running:
            self.stop()
        self.make_host_keys()
        if running:
            self.start()

    def close(self) -> None:
        """Stop and remove every file this instance made (the test user stays)."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def running_sshd(**options: int | None) -> Iterator[Sshd]:
    """A started Sshd, closed on exit; a missing sshd or non-root run fails the test."""
    try:
        server = Sshd(**options).start()
    except SshdUnavailable as exc:
        pytest.fail(f"cannot run the test sshd: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.close()
