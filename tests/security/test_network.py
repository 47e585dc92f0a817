"""Network-enabled sandboxes: each on a network of its own, fenced off from the others and from
the host (issue 8, point 1), on the real Docker engine of this machine.

Only listeners the tests start themselves are probed (a server in another sandbox, a socket
opened on the host), and only addresses of this machine; the link-local fence is checked in
the installed rules, never by sending traffic there.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress

import docker
import pytest

from hosts.backends import get_backend
from hosts.backends.docker import DockerBackend
from sandboxes import services
from sandboxes.models import Sandbox
from tenants.principal import Principal
from tests.engine import engine_cleaning_up

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

INSTANCE = f"pytest-{uuid.uuid4().hex[:8]}"

# Run inside a sandbox: "connected", or the error and how long it took to come.
PROBE = """
import socket, sys, time
started = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("connected")
except OSError as exc:
    print(f"failed {type(exc).__name__} {exc.errno} {time.monotonic() - started:.2f}")
"""


@pytest.fixture(autouse=True)
def own_instance(settings):
    settings.SANDHUB_INSTANCE = INSTANCE


@pytest.fixture
def engine() -> Iterator[docker.DockerClient]:
    with engine_cleaning_up(INSTANCE) as client:
        yield client


@pytest.fixture
def made(real_docker, team_a, team_b) -> Iterator[list[tuple[Principal, str]]]:
    """Both teams may have network; every sandbox made through `made` is deleted after."""
    for team in (team_a, team_b):
        team.allow_network = True
        team.save()
    created: list[tuple[Principal, str]] = []
    yield created
    for principal, sandbox_id in created:
        if Sandbox.objects.get(public_id=sandbox_id).status != "deleted":
            with suppress(Exception):
                services.delete_sandbox(principal, sandbox_id)


def networked(made: list[tuple[Principal, str]], principal: Principal) -> str:
    info = services.create_sandbox(principal, memory_mb=128, network=True)
    made.append((principal, info.id))
    services.write_file(principal, info.id, "probe.py", PROBE)
    return info.id


def connect(principal: Principal, sandbox_id: str, address: str, port: int) -> str:
    result = services.run_command(
        principal, sandbox_id, f"python3 probe.py {address} {port} 3", timeout=30
    )
    assert result.exit_code == 0, result
    return result.stdout.strip()


def address_of(engine: docker.DockerClient, sandbox_id: str) -> tuple[str, str]:
    """(the sandbox's address, its gateway) on its one network."""
    attrs = engine.containers.get(f"sandhub-{sandbox_id}").attrs
    (network,) = attrs["NetworkSettings"]["Networks"].values()
    return network["IPAddress"], network["Gateway"]


def host_addresses() -> list[str]:
    """Every IPv4 address of this machine but loopback (a sandbox's 127.0.0.1 is its own)."""
    output = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    found = [line.split()[3].split("/")[0] for line in output.splitlines()]
    return [address for address in found if not address.startswith("127.")]


def tagged_rules(network: str) -> list[str]:
    output = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, check=True)
    return [line for line in output.stdout.splitlines() if f'"sandhub:{network}"' in line]


def refused(outcome: str) -> bool:
    """Refused by a rule: an error that came at once, not a connection and not a timeout."""
    words = outcome.split()
    return words[0] == "failed" and words[1] != "TimeoutError" and float(words[3]) < 2.0


def test_sandboxes_of_the_same_and_of_other_teams_cannot_reach_each_other(
    made, as_alice, as_bob, engine
):
    server = networked(made, as_alice)
    same_team = networked(made, as_alice)
    other_team = networked(made, as_bob)
    services.start_background(as_alice, server, "python3 -m http.server 8080 --bind 0.0.0.0")
    address, _ = address_of(engine, server)
    deadline = time.monotonic() + 20
    while connect(as_alice, server, address, 8080) != "connected":  # it serves, to itself
        assert time.monotonic() < deadline, "the server in the sandbox never started"
        time.sleep(0.2)

    for principal, client in ((as_alice, same_team), (as_bob, other_team)):
        outcome = connect(principal, client, address, 8080)
        assert refused(outcome), outcome
    # Each on its own network: no two sandboxes share one.
    networks = {
        tuple(engine.containers.get(f"sandhub-{s}").attrs["NetworkSettings"]["Networks"])
        for s in (server, same_team, other_team)
    }
    assert len(networks) == 3


def test_the_host_is_unreachable_from_a_sandbox(made, as_alice, engine):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    accepted: list[str] = []

    def accept() -> None:
        with suppress(OSError):
            while True:
                connection, peer = listener.accept()
                accepted.append(peer[0])
                connection.close()

    threading.Thread(target=accept, daemon=True).start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3):
            pass  # the listener answers on the host itself
        sandbox = networked(made, as_alice)
        _, gateway = address_of(engine, sandbox)
        for address in [gateway, *host_addresses()]:
            outcome = connect(as_alice, sandbox, address, port)
            assert refused(outcome), f"{address}: {outcome}"
        time.sleep(0.2)
        assert accepted == ["127.0.0.1"]
    finally:
        listener.close()


def test_rules_fence_the_network_and_go_with_it(made, as_alice, engine, real_docker):
    sandbox = networked(made, as_alice)
    name = f"sandhub-{sandbox}"
    network = engine.networks.get(name)
    assert network.attrs["Options"]["com.docker.network.bridge.enable_icc"] == "false"
    assert network.attrs["Labels"]["org.sandhub.sandbox"] == sandbox
    assert network.attrs["Labels"]["org.sandhub.instance"] == INSTANCE
    bridge = network.attrs["Options"]["com.docker.network.bridge.name"]
    assert bridge.startswith("sbx-")
    assert os.path.exists(f"/sys/class/net/{bridge}")

    rules = tagged_rules(name)
    reject = "-j REJECT --reject-with icmp-admin-prohibited"
    # Towards the host: only the egress proxy's ports (tests/docker/test_egress_rules.py),
    # then everything new refused.
    to_host = [r for r in rules if r.startswith("-A INPUT ") and r.endswith(reject)]
    assert len(to_host) == 1 and f"-i {bridge} " in to_host[0], rules
    # Nothing forwarded at all: other sandboxes, other bridges, link-local included.
    forwarded = [r for r in rules if r.startswith("-A DOCKER-USER ")]
    assert forwarded == [
        f'-A DOCKER-USER -i {bridge} -m comment --comment "sandhub:{name}" {reject}'
    ]
    # Before Docker's own RETURN at the end of DOCKER-USER.
    chain = subprocess.run(
        ["iptables", "-w", "-S", "DOCKER-USER"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert chain.index("-A DOCKER-USER -j RETURN") > chain.index(forwarded[0])

    # Idempotent; and what a flush took away comes back with the next probe.
    backend = get_backend(real_docker)
    assert isinstance(backend, DockerBackend)
    networks = backend.containers.networks
    networks.install_rules(name)
    assert sorted(tagged_rules(name)) == sorted(rules)
    subprocess.run(["iptables", "-w", "-D", *shlex.split(to_host[0])[1:]], check=True)
    assert len(tagged_rules(name)) == len(rules) - 1
    assert backend.probe().healthy
    assert sorted(tagged_rules(name)) == sorted(rules)

    services.delete_sandbox(as_alice, sandbox)
    with pytest.raises(docker.errors.NotFound):
        engine.networks.get(name)
    assert tagged_rules(name) == []
    assert not os.path.exists(f"/sys/class/net/{bridge}")


def test_network_stays_off_by_default(real_docker, as_alice, engine):
    info = services.create_sandbox(as_alice, memory_mb=128)
    try:
        assert info.network is False
        attrs = engine.containers.get(f"sandhub-{info.id}").attrs
        assert attrs["HostConfig"]["NetworkMode"] == "none"
        assert engine.networks.list(names=[f"sandhub-{info.id}"]) == []
        assert tagged_rules(f"sandhub-{info.id}") == []
    finally:
        services.delete_sandbox(as_alice, info.id)
