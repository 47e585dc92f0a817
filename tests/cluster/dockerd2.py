"""A second Docker engine on this machine, on TCP with TLS: what a remote engine looks like to
the platform, for tests and benches. Not a test module.

    engine = SecondEngine.start(tmp_path)  # tcp://127.0.0.1:PORT, --tlsverify
    host = engine.register("engine-2")     # manage.py add_host NAME tcp://... --tls-ca ...
    engine.restart()                       # SIGTERM, start again on the same port and data
    engine.stop()                          # no process, mount or interface left

It keeps out of the main engine's way: its own data root, exec root (and so its own managed
containerd), pidfile and unix socket; a bridge of its own (`--bridge=<its interface>`, made
here in a private /24 no route uses; NOT `--bridge=none`, with which dockerd 20.10 deletes the
interface docker0 at start, the main engine's) and no iptables, ip forwarding or masquerade
(the main engine owns the DOCKER chains; a second daemon with iptables on would rewrite them).
Sandboxes on a remote engine have no network anyway: the platform refuses it there.
The data root is kept between runs under /var/lib/sandhub-test-<name> so the sandbox image
(~300 MB) is loaded once per machine, again only when its id differs from the main engine's.
Two runs with the same name cannot share it at once: a lock file refuses the second.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import docker
import docker.errors
import docker.tls
import requests

from tests.cluster.certs import Authority, TlsFiles

if TYPE_CHECKING:
    from hosts.models import Host

IMAGE = "sandhub/sandbox:latest"
CACHE_ROOT = Path(os.environ.get("SANDHUB_TEST_DOCKERD2_ROOT", "/var/lib"))
_ANSWER_TIMEOUT = 60.0  # seconds for dockerd to answer after it is started
_STOP_TIMEOUT = 60.0  # seconds for dockerd to stop its containers and exit on SIGTERM
_POLL = 0.1  # seconds between pings while dockerd starts: it has no readiness signal of its own


class EngineError(RuntimeError):
    """The second engine could not be started, loaded or stopped; says why (log tail)."""


def unavailable_reason() -> str:
    """Why a second dockerd cannot run here ('' when it can): tests skip with it."""
    if os.geteuid() != 0:
        return "a second dockerd needs root"
    if shutil.which("dockerd") is None:
        return "dockerd is not installed"
    return ""


@dataclass
class SecondEngine:
    root: Path  # this run's files: certificates, log, unix socket
    name: str
    port: int
    data_root: Path
    exec_root: Path
    tls: TlsFiles  # what a client passes: the CA, a client certificate and its key
    server_tls: TlsFiles
    authority: Authority
    process: subprocess.Popen[bytes] | None = None
    _lock: IO[bytes] | None = field(default=None, repr=False)
    _log: IO[bytes] | None = field(default=None, repr=False)

    # --- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def start(cls, root: Path, name: str = "dockerd2", load_image: bool = True) -> SecondEngine:
        """Generate the certificates, start dockerd on a free loopback port, load the image."""
        root.mkdir(parents=True, exist_ok=True)
        authority = Authority.create(root, f"{name}-test")
        server = authority.issue(root, f"{name}-server", server=True)
        client = authority.issue(root, f"{name}-client", server=False)
        engine = cls(
            root=root,
            name=name,
            port=_free_port(),
            data_root=CACHE_ROOT / f"sandhub-test-{name}",
            # Short: containerd's sockets live under it and a unix socket path has 107 bytes.
            exec_root=Path("/run") / f"sandhub-{name}",
            tls=client,
            server_tls=server,
            authority=authority,
        )
        engine._take_lock()
        try:
            engine._launch()
            if load_image:
                engine.ensure_image()
        except BaseException:
            engine.stop()
            raise
        return engine

    def restart(self) -> None:
        """Stop dockerd with SIGTERM (as systemd does) and start it again on the same port and
        data root; returns once it answers."""
        self.down()
        self.up()

    def down(self) -> None:
        """Stop dockerd with SIGTERM, keeping everything for `up` (the first half of restart)."""
        self._terminate()

    def up(self) -> None:
        """Start dockerd again after `down`, on the same port and data; returns once it answers."""
        self._launch()

    def stop(self) -> None:
        """Remove what the tests left (containers, volumes; the image stays), stop dockerd and
        make sure nothing of it is left: process, mounts, interfaces."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                self._remove_everything_but_images()
        self._terminate()
        _unmount_under(self.exec_root, self.data_root)
        self._remove_bridge()
        shutil.rmtree(self.exec_root, ignore_errors=True)
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    # --- what a client needs -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    @property
    def socket_path(self) -> Path:
        return self.exec_root / "docker.sock"

    @property
    def tls_files(self) -> TlsFiles:
        return self.tls

    def client(self, timeout: int = 60) -> docker.DockerClient:
        """A docker SDK client of this engine over TCP with TLS."""
        tls = docker.tls.TLSConfig(
            client_cert=(str(self.tls.cert), str(self.tls.key)),
            ca_cert=str(self.tls.ca),
            verify=True,
        )
        client = docker.DockerClient.__new__(docker.DockerClient)
        client.api = _OwnCaClient(base_url=self.url, tls=tls, timeout=timeout)
        return client

    def cli(self) -> list[str]:
        """The docker CLI's argv prefix for this engine."""
        return [
            "docker", "-H", self.url, "--tlsverify", f"--tlscacert={self.tls.ca}",
            f"--tlscert={self.tls.cert}", f"--tlskey={self.tls.key}",
        ]  # fmt: skip

    def register(self, name: str, **options: object) -> Host:
        """Add this engine as an operator would: manage.py add_host NAME tcp://... with TLS."""
        from django.core.management import call_command

        from hosts.models import Host

        with open(os.devnull, "w") as quiet:
            call_command(
                "add_host", name, self.url, tls_ca=str(self.tls.ca),
                tls_cert=str(self.tls.cert), tls_key=str(self.tls.key), stdout=quiet, **options,
            )  # fmt: skip
        return Host.objects.get(name=name)

    def answers(self) -> bool:
        try:
            with contextlib.closing(self.client(timeout=5)) as client:
                return bool(client.ping())
        except (docker.errors.DockerException, requests.RequestException, OSError):
            return False

    # --- image -------------------------------------------------------------------------------

    def ensure_image(self, image: str = IMAGE) -> str:
        """The main engine's `image` in this one, loaded only when missing or different."""
        with contextlib.closing(docker.from_env()) as main:
            wanted = main.images.get(image).id
        with (
            contextlib.closing(self.client()) as client,
            contextlib.suppress(docker.errors.ImageNotFound),
        ):
            if client.images.get(image).id == wanted:
                return wanted
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        assert save.stdout is not None
        loaded = subprocess.run([*self.cli(), "load", "-q"], stdin=save.stdout, capture_output=True)
        save.stdout.close()
        if save.wait() != 0 or loaded.returncode != 0:
            raise EngineError(f"loading {image} into {self.url} failed: {loaded.stderr!r}")
        with contextlib.closing(self.client()) as client:
            if client.images.get(image).id != wanted:
                raise EngineError(f"{image} in {self.url} is not the main engine's {wanted}")
        return wanted

    # --- internals ---------------------------------------------------------------------------

    def _take_lock(self) -> None:
        self.data_root.mkdir(parents=True, exist_ok=True)
        lock = (self.data_root.parent / f"{self.data_root.name}.lock").open("wb")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            lock.close()
            raise EngineError(
                f"{self.data_root} is in use by another second engine named {self.name}; "
                "give this one another name"
            ) from exc
        self._lock = lock

    def _argv(self) -> list[str]:
        return [
            "dockerd",
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.exec_root}/dockerd.pid",
            f"--host=unix://{self.socket_path}",
            f"--host={self.url}",
            "--tlsverify",
            f"--tlscacert={self.server_tls.ca}",
            f"--tlscert={self.server_tls.cert}",
            f"--tlskey={self.server_tls.key}",
            f"--bridge={self.bridge}",
            "--iptables=false",
            "--ip6tables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            # Its own cgroup parent: `docker` is the main engine's.
            "--cgroup-parent=/sandhub-" + self.name,
            "--storage-driver=overlay2",
        ]

    @property
    def bridge(self) -> str:
        """Its bridge interface's name (at most 15 characters)."""
        return "shd2-" + hashlib.sha256(self.name.encode()).hexdigest()[:8]

    def _make_bridge(self) -> None:
        if Path("/sys/class/net", self.bridge).exists():
            return
        subnet = _free_subnet()
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", subnet, "dev", self.bridge], check=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)

    def _remove_bridge(self) -> None:
        if Path("/sys/class/net", self.bridge).exists():
            subprocess.run(["ip", "link", "delete", self.bridge], check=False)

    def _launch(self) -> None:
        self._make_bridge()
        self.exec_root.mkdir(parents=True, exist_ok=True)
        log_path = self.root / f"{self.name}.log"
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            self._argv(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C on pytest reaches it through stop(), not directly
        )
        deadline = time.monotonic() + _ANSWER_TIMEOUT
        while not self.answers():
            if self.process.poll() is not None:
                raise EngineError(f"dockerd exited ({self.process.returncode}):\n{self._tail()}")
            if time.monotonic() > deadline:
                raise EngineError(
                    f"dockerd did not answer within {_ANSWER_TIMEOUT}s:\n{self._tail()}"
                )
            time.sleep(_POLL)

    def _terminate(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                # Its whole session: the managed containerd and its shims too.
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _remove_everything_but_images(self) -> None:
        with contextlib.closing(self.client()) as client:
            for container in client.containers.list(all=True):
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True, v=True)
            client.volumes.prune()
            client.networks.prune()

    def _tail(self, lines: int = 30) -> str:
        log_path = self.root / f"{self.name}.log"
        with contextlib.suppress(OSError):
            return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


class _OwnCaClient(docker.APIClient):
    """requests lets REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE replace the session's CA file (the
    engine's CA) on every request; this client keeps its own."""

    def merge_environment_settings(self, url, proxies, stream, verify, cert):  # type: ignore[no-untyped-def]
        return super().merge_environment_settings(
            url, proxies, stream, self.verify if verify is None else verify, cert
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _free_subnet() -> str:
    """A gateway address in a 10.250.N.0/24 that no route of this machine covers."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    taken = [
        ipaddress.ip_network(word, strict=False)
        for word in (line.split()[0] for line in routes.splitlines() if line)
        if word[0].isdigit()
    ]
    for third in range(10, 250):
        candidate = ipaddress.ip_network(f"10.250.{third}.0/24")
        if not any(candidate.overlaps(net) for net in taken):
            return f"10.250.{third}.1/24"
    raise EngineError("no free 10.250.N.0/24 for the second engine's bridge")


def _unmount_under(*roots: Path) -> None:
    """Lazily unmount what a killed dockerd left under its roots (netns files, overlays)."""
    prefixes = tuple(f"{root}/" for root in roots) + tuple(str(root) for root in roots)
    mounts = leftover_mounts(prefixes)
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


def leftover_mounts(prefixes: tuple[str, ...]) -> list[str]:
    """Mount points under any of `prefixes`, from /proc/self/mountinfo."""
    points = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            point = line.split()[4]
            if point.startswith(prefixes):
                points.append(point)
    return points
