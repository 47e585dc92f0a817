"""Helpers of the Docker egress tests: stand-ins for the egress proxy (a TCP server that
records what arrives and answers, a UDP listener that answers DNS queries with the gateway),
a test CA, and a spec with egress. Not a test module.

The stand-ins listen on 0.0.0.0 of this machine, like the real proxy: the rules under test
(hosts/backends/docker/network_rules.py) decide what of a sandbox's traffic reaches them.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import dns.message
import dns.rrset

from egress.ca import generate_ca
from hosts.backends.base import EgressSpec, ExecResult
from hosts.backends.docker import DockerBackend
from tests.docker.helpers import make_spec, run

ARRIVAL_SECONDS = 10.0  # how long a datagram or connection may take to arrive, at most


def make_ca_pem() -> str:
    """A real self-signed CA certificate (PEM), as the deployment's would be (its key thrown
    away: only trust is under test)."""
    return generate_ca(f"sandhub test CA {uuid.uuid4()}")[0]


def egress_spec(proxy_port: int, dns_port: int, ca_pem: str = "", **overrides: Any) -> Any:
    egress = EgressSpec(
        mode="public",
        proxy_port=proxy_port,
        dns_port=dns_port,
        token=uuid.uuid4().hex,
        ca_pem=ca_pem or make_ca_pem(),
    )
    return make_spec(network=True, egress=egress, **overrides)


@dataclass
class Arrival:
    peer: str
    data: bytes


@dataclass
class TcpStandIn:
    """Accepts on 0.0.0.0:<port>, records each connection's peer and first bytes, answers a
    small HTTP response (to anything: a TLS hello gets it too and the client fails, fine)."""

    port: int = 0
    arrivals: queue.Queue[Arrival] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("0.0.0.0", self.port))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, peer = self._listener.accept()
                threading.Thread(target=self._serve, args=(connection, peer), daemon=True).start()

    def _serve(self, connection: socket.socket, peer: tuple[str, int]) -> None:
        with connection, contextlib.suppress(OSError):
            connection.settimeout(ARRIVAL_SECONDS)
            data = connection.recv(65536)
            self.arrivals.put(Arrival(peer[0], data))
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nstand-in"
            )

    def close(self) -> None:
        self._listener.close()


@dataclass
class UdpStandIn:
    """Receives on 0.0.0.0:<port>; records each datagram; a DNS query gets an A answer with
    `answer` (the gateway, as the proxy gives allowed names), anything else its echo."""

    answer: str = "192.0.2.1"
    port: int = 0
    arrivals: queue.Queue[Arrival] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("0.0.0.0", self.port))
        self.port = self._socket.getsockname()[1]
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                data, peer = self._socket.recvfrom(65536)
                self.arrivals.put(Arrival(peer[0], data))
                self._socket.sendto(self._reply(data), peer)

    def _reply(self, data: bytes) -> bytes:
        try:
            query = dns.message.from_wire(data)
        except Exception:
            return data
        response = dns.message.make_response(query)
        for question in query.question:
            if question.rdtype == 1:  # A
                response.answer.append(
                    dns.rrset.from_text(question.name, 30, "IN", "A", self.answer)
                )
        return response.to_wire()

    def close(self) -> None:
        self._socket.close()


def arrivals_until(found: queue.Queue[Arrival], marker: bytes) -> list[Arrival]:
    """Every arrival up to and including the first that holds `marker` (what was sent before
    it has arrived by then, if it ever does); AssertionError when it never comes."""
    seen: list[Arrival] = []
    while True:
        try:
            arrival = found.get(timeout=ARRIVAL_SECONDS)
        except queue.Empty:
            raise AssertionError(f"{marker!r} never arrived; arrived: {seen}") from None
        seen.append(arrival)
        if marker in arrival.data:
            return seen


def drained(found: queue.Queue[Arrival]) -> list[Arrival]:
    """What has arrived so far, without waiting."""
    seen: list[Arrival] = []
    with contextlib.suppress(queue.Empty):
        while True:
            seen.append(found.get_nowait())
    return seen


def inside(backend: DockerBackend, state: dict[str, Any], code: str, *args: str) -> str:
    """Run python code in the sandbox (as its user, with its environment); its stdout."""
    script = " ".join(["python3", "-c", _quote(code), *(_quote(a) for a in args)])
    result: ExecResult = run(backend, state, script, timeout=60)
    assert result.exit_code == 0, result
    return result.stdout.decode().strip()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def iptables_lines(table: str, tag: str) -> list[str]:
    output = subprocess.run(
        ["iptables", "-w", "-t", table, "-S"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in output.splitlines() if f'"sandhub:{tag}"' in line]


@contextlib.contextmanager
def stand_ins(answer: str = "192.0.2.1") -> Iterator[tuple[TcpStandIn, UdpStandIn]]:
    tcp, udp = TcpStandIn(), UdpStandIn(answer=answer)
    try:
        yield tcp, udp
    finally:
        tcp.close()
        udp.close()
