"""A Docker sandbox behind the real egress proxy (egress.thread.ProxyThread over a dict policy
source), end to end on this machine: the sandbox's rules (hosts/backends/docker/
network_rules.py) send it to the proxy, the proxy decides.

Upstream test servers listen on docker0's address (this machine's, never the sandbox's
network: the sandbox cannot reach them itself), HTTP on port 80 and HTTPS on 443 (the ports
a transparent client keeps), with certificates of a test CA the proxy is given as
upstream_cafile. The proxy's resolver maps the test names to them. From inside the sandbox
(python's urllib: the image has no curl):

- an allowed name is reached through HTTP_PROXY and transparently (DNS answered with the
  gateway, port 80 or 443 redirected to the proxy);
- another name is refused (403, a refused tunnel), its DNS REFUSED; a raw IP is refused;
- a secret bound to a name arrives at its server, and is nowhere inside the sandbox.
"""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import pytest

from egress.ca import CertificateAuthority, generate_ca
from egress.policy import BoundSecret, SandboxPolicy, parse_rule
from egress.resolver import Resolver
from egress.server import EgressProxy
from egress.thread import ProxyThread
from hosts.backends.docker import DockerBackend
from tests.docker.egress_helpers import egress_spec, inside
from tests.egress.servers import DictSource, Recorder, Upstream

REAL = f"Bearer real-{uuid.uuid4().hex}"
SECRET = BoundSecret(
    name="API_KEY",
    hosts=("secret.test",),
    header="Authorization",
    value=REAL,
    placeholder=f"sandhub-secret-{uuid.uuid4().hex[:16]}",
)

# argv: url, "proxy" or "direct", [header value]. Prints the status and body, or the error.
GET = """
import sys, urllib.error, urllib.request
url, how = sys.argv[1], sys.argv[2]
handlers = [] if how == "proxy" else [urllib.request.ProxyHandler({})]
opener = urllib.request.build_opener(*handlers)
request = urllib.request.Request(url)
if len(sys.argv) > 3:
    request.add_header("Authorization", sys.argv[3])
try:
    with opener.open(request, timeout=15) as answer:
        print(answer.status, answer.read().decode())
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode(errors="replace"))
except Exception as exc:
    print("failed", type(exc).__name__, exc)
"""
# argv: a DNS query (hex), the server. Prints the answer (hex) or the error.
ASK_DNS = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.sendto(bytes.fromhex(sys.argv[1]), (sys.argv[2], 53))
print(s.recv(4096).hex())
"""
RESOLVE = """
import socket, sys
try:
    print(socket.getaddrinfo(sys.argv[1], 443, type=socket.SOCK_STREAM)[0][4][0])
except OSError as exc:
    print("failed", type(exc).__name__)
"""


class BridgeUpstream(Upstream):
    """tests/egress/servers.Upstream on an address and port of the test's choosing."""

    def __init__(self, name: str, address: tuple[str, int], context: Any = None) -> None:
        ThreadingHTTPServer.__init__(self, address, Recorder)
        self.name, self.context = name, context
        self.requests = []


@dataclass
class World:
    proxy: ProxyThread
    source: DictSource
    plain: Upstream  # http://allowed.test on docker0:80
    secret: Upstream  # https://secret.test on docker0:443
    docker0: str
    state: dict[str, Any]


def docker0_address() -> str:
    output = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True, check=True
    ).stdout
    return output.split()[3].split("/")[0]


@pytest.fixture(scope="module")
def world(backend: DockerBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    directory: Path = tmp_path_factory.mktemp("egress-e2e")
    proxy_cert, proxy_key = generate_ca("Sandhub e2e deployment CA")
    upstream_cert, upstream_key = generate_ca("e2e upstream CA")
    (directory / "upstream-ca.pem").write_text(upstream_cert)
    upstream_context = CertificateAuthority(upstream_cert, upstream_key).server_context(
        "secret.test"
    )
    address = docker0_address()
    source = DictSource()
    proxy = EgressProxy(
        source,
        resolver=Resolver(
            {name: address for name in ("allowed.test", "secret.test", "other.test")}
        ),
        ca=CertificateAuthority(proxy_cert, proxy_key),
        upstream_cafile=str(directory / "upstream-ca.pem"),
        report_seconds=3600,
    )
    servers = [
        BridgeUpstream("allowed.test", (address, 80)),
        BridgeUpstream("secret.test", (address, 443), upstream_context),
    ]
    threads = [_serve(server) for server in servers]
    thread = ProxyThread(proxy).start()
    spec = egress_spec(
        thread.port, thread.dns_port, proxy_cert, env={"API_KEY": SECRET.placeholder}
    )
    state = backend.provision(spec)
    try:
        policy = SandboxPolicy(
            sandbox_id=spec.sandbox_id,
            mode="allowlist",
            rules=(parse_rule("allowed.test"), parse_rule("secret.test")),
            allowed_ranges=(),
            secrets=(SECRET,),
            dns_answer=state["egress_gateway"],
            gateway=state["egress_gateway"],
        )
        source.addresses[state["egress_address"]] = policy
        source.tokens[(spec.sandbox_id, spec.egress.token)] = policy
        yield World(thread, source, servers[0], servers[1], address, state)
    finally:
        backend.destroy(state)
        thread.stop()
        for server, serving in zip(servers, threads, strict=True):
            server.shutdown()
            server.server_close()
            serving.join(5)


def _serve(server: Upstream) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return thread


def get(backend: DockerBackend, world: World, url: str, how: str, *header: str) -> str:
    return inside(backend, world.state, GET, url, how, *header)


def test_an_allowed_name_is_reached_through_http_proxy(
    backend: DockerBackend, world: World
) -> None:
    assert (
        get(backend, world, "http://allowed.test/simple/", "proxy") == "200 hello from allowed.test"
    )
    assert world.plain.requests[-1][0] == "/simple/"
    # HTTPS through CONNECT, intercepted (a secret is bound): the sandbox trusts the CA.
    answer = get(backend, world, "https://secret.test/api", "proxy", f"Bearer {SECRET.placeholder}")
    assert answer == "200 hello from secret.test"
    path, headers, _ = world.secret.requests[-1]
    assert path == "/api" and headers["Authorization"] == REAL


def test_an_allowed_name_is_reached_transparently(backend: DockerBackend, world: World) -> None:
    gateway = world.state["egress_gateway"]
    assert inside(backend, world.state, RESOLVE, "secret.test") == gateway
    assert (
        get(backend, world, "http://allowed.test/direct", "direct") == "200 hello from allowed.test"
    )
    assert world.plain.requests[-1][0] == "/direct"
    answer = get(backend, world, "https://secret.test/direct", "direct", "Bearer x")
    assert answer == "200 hello from secret.test"
    assert world.secret.requests[-1][0] == "/direct"
    assert world.secret.requests[-1][1]["Authorization"] == REAL


def test_another_name_its_dns_and_a_raw_ip_are_refused(
    backend: DockerBackend, world: World
) -> None:
    before = (len(world.plain.requests), len(world.secret.requests))
    assert get(backend, world, "http://other.test/", "proxy").startswith("403")
    assert get(backend, world, "https://other.test/", "proxy").startswith("failed")
    assert inside(backend, world.state, RESOLVE, "other.test").startswith("failed")
    query = dns.message.make_query("other.test", "A")
    reply = inside(
        backend, world.state, ASK_DNS, query.to_wire().hex(), world.state["egress_gateway"]
    )
    assert dns.message.from_wire(bytes.fromhex(reply)).rcode() == dns.rcode.REFUSED
    allowed = dns.message.make_query("allowed.test", "A")
    reply = inside(backend, world.state, ASK_DNS, allowed.to_wire().hex(), world.docker0)
    assert world.state["egress_gateway"] in dns.message.from_wire(bytes.fromhex(reply)).to_text()
    # A raw IP: through the proxy (refused there), and straight (refused by the firewall).
    assert get(backend, world, f"http://{world.docker0}/", "proxy").startswith("403")
    assert get(backend, world, f"http://{world.docker0}/", "direct").startswith("failed")
    assert get(backend, world, f"https://{world.docker0}/", "direct").startswith("failed")
    assert (len(world.plain.requests), len(world.secret.requests)) == before


SEARCH = """
import glob, os, sys
needle = sys.argv[1].encode()
hits = [k for k, v in os.environ.items() if needle in v.encode()]
for path in glob.glob("/proc/*/environ") + glob.glob("/etc/sandhub/**", recursive=True) + [
        "/etc/ssl/certs/ca-certificates.crt"]:
    try:
        if needle in open(path, "rb").read():
            hits.append(path)
    except OSError:
        pass
print("hits:", hits, "placeholder:", os.environ.get("API_KEY"))
"""


def test_the_secret_arrives_upstream_and_is_never_inside(
    backend: DockerBackend, world: World
) -> None:
    answer = get(
        backend, world, "https://secret.test/once", "proxy", f"Bearer {SECRET.placeholder}"
    )
    assert answer == "200 hello from secret.test" and REAL not in answer
    assert world.secret.requests[-1][1]["Authorization"] == REAL
    secret_part = REAL.split()[1]
    found = inside(backend, world.state, SEARCH, secret_part)
    assert found == f"hits: [] placeholder: {SECRET.placeholder}"
    env = inside(backend, world.state, "import os; print(sorted(os.environ.items()))")
    assert secret_part not in env
    # ... nor in what the proxy answers to a request it refuses.
    refused = get(backend, world, "http://other.test/", "proxy", f"Bearer {SECRET.placeholder}")
    assert refused.startswith("403") and secret_part not in refused
