"""The packet filter rules of a sandbox network with egress (hosts/backends/docker/
network_rules.py), on the real engine and this machine's iptables: what provision installs in
the nat and filter tables, that destroy removes all of it, that ensure_all repairs both
tables, and what is refused before anything is made. The traffic they let through and refuse:
tests/security/test_egress_docker.py."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import replace
from typing import Any

import docker
import docker.errors
import pytest

from hosts.backends.base import BackendError, SandboxSpec
from hosts.backends.docker import DockerBackend, trust
from hosts.backends.docker.network_rules import bridge_name
from hosts.models import Host
from tests.docker.egress_helpers import egress_spec, iptables_lines
from tests.docker.helpers import ENDPOINT, make_spec

PROXY_PORT, DNS_PORT = 43128, 45353  # only written into rules here; nothing listens


@pytest.fixture
def egress_sandbox(backend: DockerBackend) -> Any:
    spec = egress_spec(PROXY_PORT, DNS_PORT)
    state = backend.provision(spec)
    try:
        yield spec, state
    finally:
        backend.destroy(state)


def all_rules(network: str) -> dict[str, list[str]]:
    return {table: sorted(iptables_lines(table, network)) for table in ("filter", "nat")}


def test_provision_routes_the_network_to_the_proxy_only(
    egress_sandbox: Any, engine: docker.DockerClient
) -> None:
    spec, state = egress_sandbox
    network = f"sandhub-{spec.sandbox_id}"
    attrs = engine.networks.get(network).attrs
    assert attrs["Labels"]["org.sandhub.egress-ports"] == f"{PROXY_PORT},{DNS_PORT}"
    (ipam,) = attrs["IPAM"]["Config"]
    gateway, subnet = ipam["Gateway"], ipam["Subnet"]
    assert state["egress_gateway"] == gateway
    bridge = bridge_name(network)

    nat = iptables_lines("nat", network)
    assert sorted(nat) == sorted(
        [
            f"-A PREROUTING -d {gateway}/32 -i {bridge} -p tcp -m multiport --dports 80,443 "
            f'-m comment --comment "sandhub:{network}" -j REDIRECT --to-ports {PROXY_PORT}',
            f"-A PREROUTING -i {bridge} -p udp -m udp --dport 53 "
            f'-m comment --comment "sandhub:{network}" -j REDIRECT --to-ports {DNS_PORT}',
        ]
    ), nat
    tag = f'-m comment --comment "sandhub:{network}"'
    to_proxy = f"-A INPUT -s {subnet} -d {gateway}/32 -i {bridge}"
    accept_tcp = f"{to_proxy} -p tcp -m tcp --dport {PROXY_PORT} {tag} -j ACCEPT"
    accept_udp = f"{to_proxy} -p udp -m udp --dport {DNS_PORT} {tag} -j ACCEPT"
    reject = "-j REJECT --reject-with icmp-admin-prohibited"
    refuse_host = (
        f"-A INPUT -i {bridge} -m conntrack ! --ctstate RELATED,ESTABLISHED {tag} {reject}"
    )
    refuse_forward = f"-A DOCKER-USER -i {bridge} {tag} {reject}"
    assert sorted(iptables_lines("filter", network)) == sorted(
        [accept_tcp, accept_udp, refuse_host, refuse_forward]
    )
    # Order within the chains: the ACCEPTs before the reject; the reject before Docker's RETURN.
    chain = _chain("INPUT")
    assert chain.index(accept_tcp) < chain.index(refuse_host)
    assert chain.index(accept_udp) < chain.index(refuse_host)
    user = _chain("DOCKER-USER")
    assert user.index(refuse_forward) < user.index("-A DOCKER-USER -j RETURN")
    assert trust.bundle_path(network).exists()


def test_rules_are_idempotent_repaired_in_both_tables_and_go_with_the_network(
    backend: DockerBackend, egress_sandbox: Any
) -> None:
    spec, state = egress_sandbox
    network = f"sandhub-{spec.sandbox_id}"
    networks = backend.containers.networks
    complete = all_rules(network)
    networks.install_rules(network)
    assert all_rules(network) == complete

    # A flush took one rule of each table: ensure_all (every probe) puts them back.
    for table in ("filter", "nat"):
        _delete(table, complete[table][0])
    assert all(len(all_rules(network)[t]) == len(complete[t]) - 1 for t in complete)
    assert networks.ensure_all() >= 1
    assert all_rules(network) == complete

    # Rules of a network that is gone, in both tables, are dropped.
    stale = "sandhub-pytest-gone-network"
    comment = ["-m", "comment", "--comment", f"sandhub:{stale}"]
    _add("filter", ["INPUT", "-i", "sbx-00000000000", *comment, "-j", "REJECT"])
    _add("nat", ["PREROUTING", "-i", "sbx-00000000000", "-p", "udp", "--dport", "53",
                 *comment, "-j", "REDIRECT", "--to-ports", "9"])  # fmt: skip
    assert all(iptables_lines(t, stale) for t in ("filter", "nat"))
    left = trust.write_bundle(stale, "-----BEGIN CERTIFICATE-----\n")  # its bundle too
    networks.ensure_all()
    assert all_rules(stale) == {"filter": [], "nat": []}
    assert not left.exists() and trust.bundle_path(network).exists()
    assert all_rules(network) == complete

    backend.destroy(state)
    assert all_rules(network) == {"filter": [], "nat": []}
    assert not trust.bundle_path(network).exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (make_spec(network=True), "network without an egress policy"),
        (
            replace(egress_spec(PROXY_PORT, DNS_PORT), network=False),
            "egress policy without network",
        ),
    ],
    ids=["network-without-egress", "egress-without-network"],
)
def test_network_and_egress_go_together_or_nothing_is_made(
    backend: DockerBackend, engine: docker.DockerClient, spec: SandboxSpec, message: str
) -> None:
    with pytest.raises(BackendError, match=message):
        backend.provision(spec)
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(f"sandhub-{spec.sandbox_id}")
    assert engine.networks.list(names=[f"sandhub-{spec.sandbox_id}"]) == []


@pytest.mark.parametrize(
    "host",
    [
        Host(name="remote", kind="docker", endpoint="tcp://127.0.0.1:9"),
        Host(name="external", kind="docker", endpoint=ENDPOINT, options={"firewall": "external"}),
    ],
    ids=["remote-engine", "firewall-external"],
)
def test_egress_where_the_platform_sets_no_firewall_is_refused(
    host: Host, engine: docker.DockerClient
) -> None:
    other = DockerBackend(host)
    spec = egress_spec(PROXY_PORT, DNS_PORT)
    try:
        with pytest.raises(BackendError, match="live on this machine"):
            other.provision(spec)
    finally:
        other.close()
    assert engine.networks.list(names=[f"sandhub-{spec.sandbox_id}"]) == []


def test_a_network_made_before_egress_is_fenced_without_a_way_out(
    backend: DockerBackend, engine: docker.DockerClient
) -> None:
    spec = make_spec()
    network = f"sandhub-{spec.sandbox_id}"
    networks = backend.containers.networks
    labels = {"org.sandhub.managed": "1", "org.sandhub.sandbox": spec.sandbox_id}
    networks.create(engine, network, labels)  # no ports label: as made before issue 27
    try:
        rules = all_rules(network)
        assert rules["nat"] == [] and len(rules["filter"]) == 2, rules
        assert not any("ACCEPT" in line for line in rules["filter"])
        _delete("filter", rules["filter"][0])
        networks.ensure_all()
        assert all_rules(network) == rules
    finally:
        networks.remove(network)
    assert all_rules(network) == {"filter": [], "nat": []}


def _chain(chain: str) -> list[str]:
    return subprocess.run(
        ["iptables", "-w", "-S", chain], capture_output=True, text=True, check=True
    ).stdout.splitlines()


def _delete(table: str, line: str) -> None:
    subprocess.run(["iptables", "-w", "-t", table, "-D", *shlex.split(line)[1:]], check=True)


def _add(table: str, words: list[str]) -> None:
    subprocess.run(["iptables", "-w", "-t", table, "-I", *words], check=True)


def test_a_leftover_removed_by_its_id_alone_takes_its_rules_and_bundle(
    backend: DockerBackend, engine: docker.DockerClient
) -> None:
    spec = egress_spec(PROXY_PORT, DNS_PORT)
    backend.provision(spec)
    network = f"sandhub-{spec.sandbox_id}"
    assert trust.bundle_path(network).exists() and all(all_rules(network).values())
    backend.destroy({"sandbox_id": spec.sandbox_id})  # as reconciliation removes a leftover
    assert all_rules(network) == {"filter": [], "nat": []}
    assert not trust.bundle_path(network).exists()
    assert engine.networks.list(names=[network]) == []
