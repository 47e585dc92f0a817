"""The stage of the egress tests on SSH hosts (tests/ssh/test_egress_ssh.py,
tests/security/test_egress_ssh.py): isolated sandboxes whose network goes only to the egress
proxy (hosts/backends/ssh/egress.py). Not a test module.

- `StandIn`: an HTTP server on 127.0.0.1 where the proxy would be, recording the
  Proxy-Authorization of every request (what a client configured by HTTP_PROXY sends);
- `UdpEcho`: a UDP server on 127.0.0.1 echoing what it gets, and remembering it;
- `egress_spec` / `make_ca`: a SandboxSpec with an EgressSpec, and a real CA certificate;
- `uid_chain`, `output_rules`: the iptables state of a sandbox's uid, as root sees it;
- PROBE: what a sandbox runs (`python3 -c PROBE <what> ...`, its answer one JSON line).

Every address here is this machine's; nothing leaves it (the sandbox's DNS query is refused
by its uid's chain before it could).
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import secrets
import socket
import subprocess
import threading
from typing import Any

from egress.ca import generate_ca
from hosts.backends.base import EgressSpec, SandboxSpec
from hosts.backends.ssh.backend import SshBackend
from hosts.backends.ssh.isolation import CHAIN
from tests.ssh.helpers import make_backend
from tests.ssh.sshd import Sshd


class StandIn:
    """Where the egress proxy would be: answers every request 200 "stand-in <n>", and keeps
    (Proxy-Authorization, request line) of each."""

    def __init__(self) -> None:
        seen: list[tuple[str, str]] = []
        self.seen = seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                seen.append((self.headers.get("Proxy-Authorization", ""), self.requestline))
                body = f"stand-in {len(seen)}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class UdpEcho:
    """A UDP server on `address` echoing each datagram, which it also keeps."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, 0))
        self.port = int(self.sock.getsockname()[1])
        self.got: list[bytes] = []
        threading.Thread(target=self._echo, daemon=True).start()

    def _echo(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                data, peer = self.sock.recvfrom(2048)
                self.got.append(data)
                self.sock.sendto(data, peer)

    def close(self) -> None:
        self.sock.close()


def basic(sandbox_id: str, token: str) -> str:
    """The Proxy-Authorization a client sends for http://<id>:<token>@proxy."""
    return "Basic " + base64.b64encode(f"{sandbox_id}:{token}".encode()).decode()


def make_ca() -> str:
    """A real self-signed CA certificate (PEM), as the deployment's would be (its key thrown
    away: only trust is under test)."""
    return generate_ca(f"sandhub test {secrets.token_hex(4)}")[0]


def egress_spec(proxy_port: int, ca_pem: str, **changes: Any) -> SandboxSpec:
    values: dict[str, Any] = {
        "sandbox_id": "sb_" + secrets.token_hex(6),
        "image_reference": "",
        "cpus": 1.0,
        "memory_mb": 256,
        "pids_limit": 128,
        "network": True,
        "env": {"OWN_VARIABLE": "own"},
        "disk_mb": 64,
        "egress": EgressSpec(
            mode="allowlist",
            proxy_port=proxy_port,
            dns_port=5353,
            token="tok-" + secrets.token_hex(12),
            ca_pem=ca_pem,
        ),
    }
    values.update(changes)
    return SandboxSpec(**values)


def backend_for(server: Sshd, username: str, base_dir: str, **options: Any) -> SshBackend:
    """SshBackend logging in to `server` as `username` (unsaved Host: no database needed)."""
    return make_backend(
        server, base_dir, agent=True, name="egress-box", username=username, options=options
    )


def inside(
    backend: SshBackend, state: dict[str, Any], script: str, stdin: bytes | None = None
) -> str:
    """A shell script's stdout, run in the sandbox through its agent (exit 0 asserted)."""
    result = backend.exec(
        state,
        ["sh", "-c", script],
        cwd="/workspace",
        env={},
        timeout=60,
        output_cap=1 << 20,
        stdin=stdin,
    )
    assert result.exit_code == 0, (script, result.stdout, result.stderr)
    return result.stdout.decode()


def probe(backend: SshBackend, state: dict[str, Any], *args: object, unset: str = "") -> Any:
    """PROBE's answer to `what args...` in the sandbox (with the variable `unset` removed
    from its environment, when one is named)."""
    words = " ".join(str(a) for a in args)
    prefix = f"env -u {unset} " if unset else ""
    said = inside(backend, state, f"{prefix}python3 -c '{PROBE}' {words}")
    return json.loads(said.splitlines()[-1])


def uid_chain(uid: int) -> list[str]:
    """The rules of the uid's own egress chain (-S), [] when it does not exist."""
    done = subprocess.run(
        ["iptables", "-w", "-S", f"{CHAIN}-{uid}"], capture_output=True, text=True, check=False
    )
    return done.stdout.splitlines() if done.returncode == 0 else []


def udp_refusals(uid: int) -> int:
    """Packets the uid's chain refused by its UDP rule."""
    done = subprocess.run(
        ["iptables", "-w", "-L", f"{CHAIN}-{uid}", "-v", "-x", "-n"],
        capture_output=True,
        text=True,
        check=True,
    )
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) > 3 and words[2] == "REJECT" and words[3] in ("udp", "17"):
            return int(words[0])
    raise AssertionError(f"no UDP rule in the chain of uid {uid}: {done.stdout}")


def output_rules(uid: int) -> list[str]:
    rules = subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True)
    return [line for line in rules.stdout.splitlines() if f"--uid-owner {uid} " in line]


# Run in a sandbox as `python3 -c PROBE <what> args...`: one JSON line. Stdlib only; no single
# quote (the shell line quotes it so).
PROBE = """
import json, os, socket, sys, urllib.request
what, args = sys.argv[1], sys.argv[2:]
def tcp(target):
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return "connected"
    except OSError as exc:
        return "failed %s" % exc
def udp(target, payload):
    host, port = target.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(3)
    try:
        sock.sendto(payload, (host, int(port)))
        return "answered %r" % sock.recvfrom(2048)[0]
    except OSError as exc:
        return "failed %s" % exc
def get(url, header=None, variable=None):
    request = urllib.request.Request(url)
    if header:  # "Bearer $variable": a placeholder the proxy replaces
        request.add_header(header, "Bearer " + os.environ[variable])
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return "%d %s" % (answer.status, answer.read().decode())
    except Exception as exc:
        return "failed %s" % exc
if what == "tcp":
    print(json.dumps({t: tcp(t) for t in args}))
elif what == "udp":
    print(json.dumps({t: udp(t, b"hello") for t in args}))
elif what == "dns":
    query = bytes.fromhex("abcd01000001000000000000") + b"\\x09localhost\\x00\\x00\\x01\\x00\\x01"
    print(json.dumps({"answer": udp(args[0] + ":53", query)}))
elif what == "get":
    print(json.dumps({"answer": get(*args)}))
elif what == "find":  # the needle: reversed in a file, removed once read (never in an argv)
    with open(args[0]) as handle:
        needle = handle.read().strip()[::-1].encode()
    os.remove(args[0])
    found = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for name in ("environ", "cmdline"):
            try:
                with open("/proc/%s/%s" % (pid, name), "rb") as handle:
                    if needle in handle.read():
                        found.append("/proc/%s/%s" % (pid, name))
            except OSError:
                pass
    for root in args[1:]:
        for top, dirs, files in os.walk(root):
            for name in files:
                try:
                    with open(os.path.join(top, name), "rb") as handle:
                        if needle in handle.read(1 << 22):
                            found.append(os.path.join(top, name))
                except OSError:
                    pass
    print(json.dumps({"found": found, "self": os.getpid()}))
"""
