"""A Docker sandbox with egress reaches the egress proxy and nothing else (issue 27), on the
real engine of this machine, with stand-ins for the proxy (tests/docker/egress_helpers.py):
a TCP server on 0.0.0.0:<proxy port> and a UDP listener on 0.0.0.0:<dns port> that record
what arrives and from which address.

Reached: <gateway>:80 and :443 (redirected), the proxy through HTTP_PROXY, DNS to any
address:53 (redirected), each with the sandbox's own address as the source. Refused at once
(EHOSTUNREACH: the rules' icmp-admin-prohibited): another sandbox, a listener of the test on
the gateway's other ports, the host's other addresses (the proxy's port included), any UDP
but 53. Two tenants arrive with different addresses, and a sandbox cannot send with another's
(no NET_ADMIN, no NET_RAW; a forged source address is refused by the rules).

Only addresses of this machine are used: the gateways, the host's own addresses.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from hosts.backends.base import LABEL_INSTANCE
from hosts.backends.docker import DockerBackend
from hosts.models import Host
from tests.docker.egress_helpers import (
    TcpStandIn,
    UdpStandIn,
    arrivals_until,
    drained,
    egress_spec,
    inside,
    stand_ins,
)
from tests.docker.helpers import ENDPOINT, IMAGE
from tests.engine import engine_cleaning_up

pytestmark = [pytest.mark.docker]

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"
EHOSTUNREACH = 113

# argv: address port [payload]. Prints what the peer answered, or "failed <errno>".
TCP = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
        s.sendall(sys.argv[3].encode() if len(sys.argv) > 3 else b"hello")
        print(s.recv(1000).decode(errors="replace").split("\\r\\n")[-1] or "answered")
except OSError as exc:
    print("failed", exc.errno)
"""
# argv: address port payload [seconds]. A datagram, then what came back: "answered", or
# "failed <errno>": the ICMP error of a refusal on the connected socket, or None when nothing
# came (the kernel rate-limits ICMP errors: after a few refusals in a row, some are not sent).
UDP = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(float(sys.argv[4]) if len(sys.argv) > 4 else 5)
s.connect((sys.argv[1], int(sys.argv[2])))
try:
    s.send(sys.argv[3].encode())
    s.recv(1000)
    print("answered")
except OSError as exc:
    print("failed", exc.errno)
"""
VIA_PROXY = """
import urllib.request
print(urllib.request.urlopen("http://pypi.test/simple/", timeout=10).read().decode())
"""
RESOLVE = """
import socket
print(socket.getaddrinfo("files.pypi.test", 443, type=socket.SOCK_STREAM)[0][4][0])
"""
# Everything a process without capabilities may try to send with another source address.
FORGE = """
import fcntl, socket, struct, sys
for kind in (socket.IPPROTO_RAW, socket.IPPROTO_UDP):
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, kind)
        print("raw socket made")
    except PermissionError:
        print("raw refused")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
address = socket.inet_aton(sys.argv[1])
request = struct.pack("16sH2s4s8s", b"eth0", socket.AF_INET, b"", address, b"")
try:
    fcntl.ioctl(s, 0x8916, request)  # SIOCSIFADDR: give eth0 the other sandbox's address
    print("address changed")
except PermissionError:
    print("address refused")
s.setsockopt(socket.SOL_IP, 15, 1)  # IP_FREEBIND: bind to an address that is not ours
s.bind((sys.argv[1], 0))
try:
    s.sendto(b"forged", (sys.argv[2], 53))
    print("forged sent")
except OSError as exc:  # the kernel may find no route from that source: nothing sent
    print("forged not sent", exc.errno)
"""


# argv: source, destination, marker. Run as root with NET_RAW in a helper container on a
# sandbox's network (what a sandbox never has): a UDP datagram to <destination>:53 with a
# forged source address, then a genuine one.
FORGE_AS_ROOT = """
import socket, struct, sys
source, destination, marker = sys.argv[1], sys.argv[2], sys.argv[3]
payload = ("forged-" + marker).encode()
udp = struct.pack("!HHHH", 40000, 53, 8 + len(payload), 0) + payload
header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(source), socket.inet_aton(destination))
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
raw.sendto(header + udp, (destination, 0))
plain = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
plain.sendto(("genuine-" + marker).encode(), (destination, 53))
print("sent")
"""


@pytest.fixture(scope="module")
def backend() -> Iterator[DockerBackend]:
    with engine_cleaning_up(INSTANCE):
        instance = DockerBackend(Host(name="local", kind="docker", endpoint=ENDPOINT))
        yield instance
        instance.close()


@pytest.fixture(scope="module")
def proxy() -> Iterator[tuple[TcpStandIn, UdpStandIn]]:
    with stand_ins() as found:
        yield found


@pytest.fixture(scope="module")
def tenants(backend: DockerBackend, proxy: Any) -> Iterator[list[tuple[Any, dict[str, Any]]]]:
    """Two sandboxes with egress to the stand-ins: (spec, state) each."""
    tcp, udp = proxy
    made = []
    try:
        for _ in range(2):
            spec = egress_spec(tcp.port, dns_port=udp.port, labels={LABEL_INSTANCE: INSTANCE})
            made.append((spec, backend.provision(spec)))
        yield made
    finally:
        for _, state in made:
            backend.destroy(state)


def host_addresses() -> list[str]:
    """Every IPv4 address of this machine but loopback (other bridges' gateways included)."""
    output = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    found = [line.split()[3].split("/")[0] for line in output.splitlines()]
    return [address for address in found if not address.startswith("127.")]


def test_http_and_https_to_the_gateway_arrive_at_the_proxy(
    backend: DockerBackend, tenants: Any, proxy: Any
) -> None:
    tcp, _ = proxy
    (_, state), _ = tenants
    for port in (80, 443):
        marker = f"to-{port}-{uuid.uuid4().hex[:6]}"
        assert inside(backend, state, TCP, state["egress_gateway"], str(port), marker) == "stand-in"
        (arrival,) = [a for a in arrivals_until(tcp.arrivals, marker.encode()) if a.data]
        assert arrival.peer == state["egress_address"]


def test_http_proxy_from_the_environment_reaches_the_proxy_with_the_credential(
    backend: DockerBackend, tenants: Any, proxy: Any
) -> None:
    tcp, _ = proxy
    (spec, state), _ = tenants
    assert inside(backend, state, VIA_PROXY) == "stand-in"
    (arrival,) = arrivals_until(tcp.arrivals, b"GET http://pypi.test/simple/ HTTP/1.1")[-1:]
    assert arrival.peer == state["egress_address"]
    credential = base64.b64encode(f"{spec.sandbox_id}:{spec.egress.token}".encode())
    assert b"Proxy-Authorization: Basic " + credential in arrival.data


def test_dns_to_any_address_arrives_at_the_proxy_from_the_sandbox(
    backend: DockerBackend, tenants: Any, proxy: Any
) -> None:
    _, udp = proxy
    (_, state), _ = tenants
    for address in [state["egress_gateway"], *host_addresses()]:
        marker = f"dns-{uuid.uuid4().hex[:6]}"
        assert inside(backend, state, UDP, address, "53", marker) == "answered", address
        arrival = arrivals_until(udp.arrivals, marker.encode())[-1]
        assert arrival.peer == state["egress_address"], address
    # The container's resolver (dns=[gateway]) asks the proxy too: its answer is what counts.
    udp.answer = state["egress_gateway"]
    assert inside(backend, state, RESOLVE) == state["egress_gateway"]
    assert any(b"files" in a.data for a in arrivals_until(udp.arrivals, b"pypi"))


def test_everything_else_is_refused(backend: DockerBackend, tenants: Any, proxy: Any) -> None:
    tcp, udp = proxy
    (_, state), (_, other) = tenants
    own_tcp, own_udp = TcpStandIn(), UdpStandIn()  # the test's listeners, not the proxy
    # The host's addresses but the one the proxy is reached at (other bridges' gateways too).
    others = [address for address in host_addresses() if address != state["egress_gateway"]]
    try:
        refused_tcp = [
            (other["egress_address"], 22),  # another sandbox (nothing forwarded)
            (other["egress_address"], tcp.port),
            (other["egress_gateway"], tcp.port),  # another bridge's address: the host
            (state["egress_gateway"], own_tcp.port),  # the gateway's other ports
            *[(address, port) for address in others for port in (own_tcp.port, tcp.port, 80)],
        ]
        for address, port in refused_tcp:
            outcome = inside(backend, state, TCP, address, str(port), "refused?")
            assert outcome == f"failed {EHOSTUNREACH}", f"{address}:{port}: {outcome}"
        refused_udp = [(state["egress_gateway"], own_udp.port), (other["egress_address"], 53)]
        refused_udp += [(address, own_udp.port) for address in others]
        for address, port in refused_udp:
            if (address, port) == (other["egress_address"], 53):
                continue  # redirected to the proxy like any DNS: checked above
            outcome = inside(backend, state, UDP, address, str(port), "refused?", "1")
            assert outcome in (f"failed {EHOSTUNREACH}", "failed None"), f"{address}:{port}"
        # Sent before this marker, so arrived before it if at all.
        marker = f"last-{uuid.uuid4().hex[:6]}"
        assert inside(backend, state, UDP, state["egress_gateway"], "53", marker) == "answered"
        arrived = arrivals_until(udp.arrivals, marker.encode()) + drained(tcp.arrivals)
        assert not [a for a in arrived if b"refused?" in a.data]
        assert own_tcp.arrivals.empty() and own_udp.arrivals.empty()
    finally:
        own_tcp.close()
        own_udp.close()


def test_tenants_arrive_with_their_own_address_and_cannot_take_another(
    backend: DockerBackend, tenants: Any, proxy: Any
) -> None:
    tcp, udp = proxy
    (_, a), (_, b) = tenants
    assert a["egress_address"] != b["egress_address"]
    for state in (a, b):
        marker = f"who-{uuid.uuid4().hex[:6]}"
        assert inside(backend, state, TCP, state["egress_gateway"], "443", marker) == "stand-in"
        assert arrivals_until(tcp.arrivals, marker.encode())[-1].peer == state["egress_address"]

    forged = inside(backend, a, FORGE, b["egress_address"], a["egress_gateway"])
    assert forged.splitlines()[:3] == ["raw refused", "raw refused", "address refused"]
    assert forged.splitlines()[3].startswith("forged "), forged
    status = inside(backend, a, "print(open('/proc/self/status').read())")
    assert "CapEff:\t0000000000000000" in status and "CapBnd:\t0000000000000000" in status
    # The forged datagram went to port 53 (redirected to the proxy) but is refused there: the
    # next one, sent after it with A's own address, is the first to arrive.
    marker = f"after-forged-{uuid.uuid4().hex[:6]}"
    assert inside(backend, a, UDP, a["egress_gateway"], "53", marker) == "answered"
    arrived = arrivals_until(udp.arrivals, marker.encode())
    assert [(x.peer, x.data) for x in arrived] == [(a["egress_address"], marker.encode())]


def test_a_forged_source_address_is_refused_even_with_net_raw(tenants: Any, proxy: Any) -> None:
    """Beyond what a sandbox can do (above): the rules accept traffic to the proxy only from
    the network's own subnet, so even a process with NET_RAW on A's network cannot make the
    proxy take its packets for B's."""
    _, udp = proxy
    (_, a), (_, b) = tenants
    marker = uuid.uuid4().hex[:8]
    client = docker.from_env()
    try:
        output = client.containers.run(
            IMAGE,
            ["python3", "-c", FORGE_AS_ROOT, b["egress_address"], a["egress_gateway"], marker],
            network=a["network"],
            user="root",
            cap_add=["NET_RAW"],
            remove=True,
            labels={LABEL_INSTANCE: INSTANCE},
        )
        assert output.strip() == b"sent"
        arrived = arrivals_until(udp.arrivals, f"genuine-{marker}".encode())
        assert not [x for x in arrived if f"forged-{marker}".encode() in x.data], arrived
        assert arrived[-1].peer not in ("", a["egress_address"], b["egress_address"])
    finally:
        client.close()
