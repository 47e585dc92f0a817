"""An isolated SSH sandbox with an egress policy reaches the egress proxy and nothing else
(hosts/backends/ssh/egress.py), on a real sshd with real sudo: a stand-in where the proxy
would be (127.0.0.1:<port>, 10.0.2.2 inside), listeners of the test on the host's other
loopback ports and other addresses, a UDP echo, and slirp4netns's DNS forwarder."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from hosts.backends.base import LABEL_INSTANCE, BackendError, EgressSpec
from hosts.backends.egress import BUNDLE_PATH, SYSTEM_BUNDLE_PATH
from hosts.backends.ssh import egress
from hosts.backends.ssh.backend import SshBackend
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.hostprobe import HostFacts
from hosts.backends.ssh.provision import provision
from tests.agent.shellcases import shell
from tests.agent.terminalcases import new_id
from tests.security.ssh_tenants import HostListener, host_addresses
from tests.ssh.egress_stage import (
    StandIn,
    UdpEcho,
    backend_for,
    basic,
    egress_spec,
    inside,
    make_ca,
    output_rules,
    probe,
    udp_refusals,
    uid_chain,
)
from tests.ssh.helpers import user_exists
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.close()


@pytest.fixture(scope="module")
def ca() -> str:
    return make_ca()


@pytest.fixture(scope="module")
def backend(sshd: Sshd, base_dir: str, sudo_for_test_user: None) -> Iterator[SshBackend]:
    ssh = backend_for(sshd, sshd.username, base_dir)
    yield ssh
    ssh.close()


@pytest.fixture(scope="module")
def box(backend: SshBackend, stand_in: StandIn, ca: str) -> Iterator[dict[str, Any]]:
    """One egress sandbox for the module (its tests only look, or stop and start it)."""
    spec = egress_spec(stand_in.port, ca)
    state = backend.provision(spec)
    state["test_token"] = spec.egress.token if spec.egress else ""
    yield state
    backend.destroy(state)


def test_the_proxy_is_in_the_environment_and_reached_with_the_sandboxs_credential(
    backend: SshBackend, box: dict[str, Any], stand_in: StandIn
) -> None:
    sandbox_id, token = box["sandbox_id"], box["test_token"]
    url = f"http://{sandbox_id}:{token}@10.0.2.2:{stand_in.port}"
    env = inside(backend, box, "env")
    assert f"HTTP_PROXY={url}\n" in env and f"https_proxy={url}\n" in env
    assert f"SSL_CERT_FILE={BUNDLE_PATH}\n" in env and "OWN_VARIABLE=own\n" in env
    stand_in.seen.clear()
    answer = probe(backend, box, "get", "http://allowed.test/path")["answer"]
    assert answer.startswith("200 stand-in"), answer
    assert stand_in.seen == [(basic(sandbox_id, token), "GET http://allowed.test/path HTTP/1.1")]


def test_no_process_of_the_sandbox_carries_roots_environment(
    backend: SshBackend, box: dict[str, Any]
) -> None:
    # The holder was started by the provision script under sudo: its environment was root's,
    # SUDO_COMMAND holding the whole script (paths, the egress variables), readable in /proc.
    seen = inside(backend, box, "for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null || :; done")
    assert "SANDHUB_SANDBOX_ID=" in seen  # the search reads the sandbox's own processes
    assert "SUDO_COMMAND=" not in seen and "egress_addr=" not in seen


def test_shell_sessions_have_the_proxy_too(backend: SshBackend, box: dict[str, Any]) -> None:
    session = new_id("s")
    try:
        said = shell(backend, box, session, 'echo "$HTTPS_PROXY $NODE_EXTRA_CA_CERTS"')
        assert said.stdout.decode().split() == [
            f"http://{box['sandbox_id']}:{box['test_token']}@10.0.2.2:{box['egress']['port']}",
            BUNDLE_PATH,
        ], said
    finally:
        backend.close_terminal(box, session)


def test_everything_but_the_proxy_is_refused(
    backend: SshBackend, box: dict[str, Any], stand_in: StandIn
) -> None:
    loopback, anywhere, echo = HostListener("127.0.0.1"), HostListener("0.0.0.0"), UdpEcho()
    try:
        others = [f"{address}:{anywhere.port}" for address in host_addresses()]
        assert any(target.startswith("172.17.") for target in others), others  # docker0
        targets = [f"10.0.2.2:{loopback.port}", f"10.0.2.2:{anywhere.port}", *others]
        outcomes = probe(backend, box, "tcp", f"10.0.2.2:{stand_in.port}", *targets)
        assert outcomes.pop(f"10.0.2.2:{stand_in.port}") == "connected"
        reached = {target: said for target, said in outcomes.items() if said == "connected"}
        assert not reached and loopback.peers == [] and anywhere.peers == [], outcomes
        refused_before = udp_refusals(box["uid"])
        udp = probe(backend, box, "udp", f"10.0.2.2:{echo.port}")[f"10.0.2.2:{echo.port}"]
        dns = probe(backend, box, "dns", "10.0.2.3")["answer"]
        assert udp.startswith("failed") and dns.startswith("failed"), (udp, dns)
        assert echo.got == []
        # Both refused by the uid's chain on the host: the DNS query never left this machine.
        assert udp_refusals(box["uid"]) >= refused_before + 2
    finally:
        loopback.close(), anywhere.close(), echo.close()


def test_the_trust_bundle_is_at_both_paths_read_only(
    backend: SshBackend, box: dict[str, Any], ca: str
) -> None:
    for path in (BUNDLE_PATH, SYSTEM_BUNDLE_PATH):
        assert ca.strip() in inside(backend, box, f"cat {path}"), path
        said = inside(backend, box, f"test -w {path} && echo writable; echo x >> {path} || :")
        assert "writable" not in said
    system = open(SYSTEM_BUNDLE_PATH).read()  # noqa: PTH123, SIM115
    assert inside(backend, box, f"cat {BUNDLE_PATH}").startswith(system[:2000])
    on_host = os.stat(f"{box['dir']}/trust/ca-bundle.crt")
    assert on_host.st_uid == 0 and stat.S_IMODE(on_host.st_mode) == 0o644


def test_stop_and_start_keep_the_policy(
    backend: SshBackend, box: dict[str, Any], stand_in: StandIn, ca: str
) -> None:
    listener = HostListener("127.0.0.1")
    try:
        backend.stop(box)
        assert output_rules(box["uid"]) == [] and uid_chain(box["uid"]) == []
        backend.start(box)
        assert len(output_rules(box["uid"])) == 1 and len(uid_chain(box["uid"])) == 4
        outcomes = probe(
            backend, box, "tcp", f"10.0.2.2:{stand_in.port}", f"10.0.2.2:{listener.port}"
        )
        assert outcomes[f"10.0.2.2:{stand_in.port}"] == "connected", outcomes
        assert outcomes[f"10.0.2.2:{listener.port}"] != "connected" and listener.peers == []
        assert ca.strip() in inside(backend, box, f"cat {SYSTEM_BUNDLE_PATH}")
        assert box["test_token"] in inside(backend, box, "echo $HTTPS_PROXY")
    finally:
        listener.close()


def test_destroy_removes_the_uids_rule_and_chain(
    backend: SshBackend, stand_in: StandIn, ca: str
) -> None:
    state = backend.provision(egress_spec(stand_in.port, ca))
    chain = uid_chain(state["uid"])
    assert f"-A SANDHUB-EGRESS-{state['uid']} -d 127.0.0.1/32 -p tcp -m tcp --dport " \
        f"{stand_in.port} -j ACCEPT" in chain  # fmt: skip
    assert len(output_rules(state["uid"])) == 1
    # As reconciliation removes what it finds on a host: by id and directory alone.
    backend.destroy({"sandbox_id": state["sandbox_id"], "dir": state["dir"]})
    assert output_rules(state["uid"]) == [] and uid_chain(state["uid"]) == []
    assert not os.path.exists(state["dir"])


def test_a_fork_from_a_snapshot_has_its_own_policy(
    backend: SshBackend, box: dict[str, Any], stand_in: StandIn, ca: str
) -> None:
    inside(backend, box, "echo kept > kept.txt")
    taken = backend.snapshot(box, "snap_" + secrets.token_hex(6), {LABEL_INSTANCE: "egress"})
    try:
        spec = egress_spec(stand_in.port, ca, snapshot=taken.state)
        fork = backend.provision(spec)
        try:
            assert inside(backend, fork, "cat kept.txt") == "kept\n"
            assert ca.strip() in inside(backend, fork, f"cat {BUNDLE_PATH}")
            stand_in.seen.clear()
            answer = probe(backend, fork, "get", "http://allowed.test/fork")["answer"]
            assert answer.startswith("200 stand-in"), answer
            assert stand_in.seen[0][0] == basic(spec.sandbox_id, spec.egress.token)  # type: ignore[union-attr]
        finally:
            backend.destroy(fork)
    finally:
        backend.delete_snapshot(taken.state)


# -- refused before anything is made -----------------------------------------------------------


def egress_chains() -> set[str]:
    listed = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
    return {line.split()[1] for line in listed.splitlines() if line.startswith("-N SANDHUB-")}


def nothing_left(
    backend: SshBackend, sandbox_id: str, conn: SshConnection, chains: set[str]
) -> None:
    """No directory, no user, no chain more than before (no uid was ever given)."""
    assert not os.path.exists(f"{backend.base_dir}/{sandbox_id}")
    assert not user_exists(conn, "sbx-" + sandbox_id[3:])
    assert egress_chains() == chains


def test_network_without_an_egress_policy_is_refused(
    backend: SshBackend, stand_in: StandIn, ca: str
) -> None:
    spec, chains = egress_spec(stand_in.port, ca, egress=None), egress_chains()
    with pytest.raises(BackendError, match="network without an egress policy"):
        backend.provision(spec)
    nothing_left(backend, spec.sandbox_id, backend.connection(), chains)


def test_a_remote_host_needs_its_egress_proxy_option(
    backend: SshBackend, sshd: Sshd, base_dir: str, stand_in: StandIn, ca: str, monkeypatch
) -> None:
    monkeypatch.setattr(egress, "is_this_machine", lambda address: False)
    spec, chains = egress_spec(stand_in.port, ca), egress_chains()
    with pytest.raises(BackendError, match="egress_proxy") as refused:
        backend.provision(spec)
    assert "is not this machine" in str(refused.value)
    nothing_left(backend, spec.sandbox_id, backend.connection(), chains)
    # Told how that host reaches the proxy (here, a port of its loopback), it has network.
    told = backend_for(sshd, sshd.username, base_dir, egress_proxy=f"127.0.0.1:{stand_in.port}")
    try:
        state = told.provision(egress_spec(12345, ca))
        try:
            assert state["egress"]["port"] == stand_in.port
            answer = probe(told, state, "get", "http://allowed.test/")["answer"]
            assert answer.startswith("200 stand-in"), answer
        finally:
            told.destroy(state)
    finally:
        told.close()


def test_a_host_without_isolation_refuses_an_egress_policy(
    sshd: Sshd, base_dir: str, stand_in: StandIn, ca: str
) -> None:
    facts = HostFacts(login_user=sshd.username, uid=os.getuid(), sudo=False, systemd=False,
                      python3="3")  # fmt: skip
    spec = egress_spec(stand_in.port, ca)
    with SshConnection(sshd.target()) as conn:
        with pytest.raises(BackendError, match="needs an isolated SSH host"):
            provision(conn, facts, spec, base_dir, "egress-test")
        assert not os.path.exists(f"{base_dir}/{spec.sandbox_id}")


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("127.0.0.1:3128", ("10.0.2.2", 3128, "127.0.0.1", True)),
        ("localhost:8080", ("10.0.2.2", 8080, "127.0.0.1", True)),
        ("192.0.2.10:3128", ("192.0.2.10", 3128, "192.0.2.10", False)),
        (None, ("10.0.2.2", 3128, "127.0.0.1", True)),
    ],
)
def test_routes(option: str | None, expected: tuple[str, int, str, bool]) -> None:
    spec = EgressSpec(mode="public", proxy_port=3128, dns_port=53, token="t", ca_pem="x")
    route = egress.route_for(spec, "127.0.0.1", option)
    assert (route.address, route.port, route.firewall_address, route.host_loopback) == expected
    assert egress.route_from_state({"egress": route.as_state()}) == route


@pytest.mark.parametrize("option", ["127.0.0.2:3128", "proxy.example:3128", "[::1]:3128",
                                    "127.0.0.1", "127.0.0.1:0", "127.0.0.1:x"])  # fmt: skip
def test_bad_egress_proxy_options_are_refused(option: str) -> None:
    spec = EgressSpec(mode="public", proxy_port=3128, dns_port=53, token="t", ca_pem="x")
    with pytest.raises(BackendError, match="egress_proxy"):
        egress.route_for(spec, "10.1.2.3", option)
