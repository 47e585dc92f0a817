"""A sandbox container with egress (hosts/backends/docker/container_egress.py), on the real
engine: the proxy's variables and DNS, the trust bundle read-only at both paths, the egress
state across a stop and a start, and a sandbox made from a snapshot given the same."""

from __future__ import annotations

import uuid
from typing import Any

import docker
import pytest

from hosts.backends.docker import DockerBackend, trust
from hosts.backends.egress import proxy_environment, proxy_url
from tests.docker.egress_helpers import egress_spec, inside, make_ca_pem
from tests.docker.helpers import IMAGE, run

PROXY_PORT, DNS_PORT = 43128, 45353  # nothing listens: only what the container is given

READ_BUNDLES = """
for path in ("/etc/sandhub/ca-bundle.crt", "/etc/ssl/certs/ca-certificates.crt"):
    print(path, open(path).read().count("BEGIN CERTIFICATE"), open(path).read().endswith(
        __import__("sys").argv[1].strip() + "\\n"))
"""


@pytest.fixture
def made(backend: DockerBackend) -> Any:
    states: list[dict[str, Any]] = []
    yield states
    for state in states:
        backend.destroy(state)


def test_the_container_is_sent_to_the_proxy_and_trusts_its_ca(
    backend: DockerBackend, engine: docker.DockerClient, made: list[dict[str, Any]]
) -> None:
    ca = make_ca_pem()
    spec = egress_spec(PROXY_PORT, DNS_PORT, ca)
    state = backend.provision(spec)
    made.append(state)
    assert spec.egress is not None
    gateway, address = state["egress_gateway"], state["egress_address"]
    attrs = engine.containers.get(state["container_id"]).attrs
    (network,) = attrs["NetworkSettings"]["Networks"].values()
    assert (network["Gateway"], network["IPAddress"]) == (gateway, address)
    assert attrs["HostConfig"]["Dns"] == [gateway]

    url = proxy_url(spec.sandbox_id, spec.egress.token, gateway, PROXY_PORT)
    wanted = {**proxy_environment(url), "SANDHUB_TEST": "yes"}
    env = dict(
        line.split("=", 1)
        for line in run(backend, state, "env").stdout.decode().split("\n")
        if "=" in line
    )
    assert {name: env.get(name) for name in wanted} == wanted
    assert url.startswith(f"http://{spec.sandbox_id}:") and url.endswith(f"@{gateway}:{PROXY_PORT}")

    # Both paths: the system's certificates, then the CA, read by the sandbox user.
    lines = inside(backend, state, READ_BUNDLES, ca).splitlines()
    assert [line.split()[0] for line in lines] == [
        "/etc/sandhub/ca-bundle.crt",
        "/etc/ssl/certs/ca-certificates.crt",
    ]
    for line in lines:
        _, count, ends_with_ca = line.split()
        assert int(count) > 1 and ends_with_ca == "True", lines
    # ... and never changed by it, nor replaced (read-only bind over a read-only root).
    for path in ("/etc/sandhub/ca-bundle.crt", "/etc/ssl/certs/ca-certificates.crt"):
        written = run(
            backend, state, f"echo x >> {path} || echo refused; mv {path} /tmp/x || echo kept"
        )
        assert written.stdout.decode().split() == ["refused", "kept"], written
    assert trust.bundle_path(f"sandhub-{spec.sandbox_id}").read_text().endswith(ca.strip() + "\n")


def test_stop_and_start_keep_the_egress_state(
    backend: DockerBackend, made: list[dict[str, Any]]
) -> None:
    state = backend.provision(egress_spec(PROXY_PORT, DNS_PORT))
    made.append(state)
    before = dict(state)
    backend.stop(state)
    backend.start(state)
    assert state == before  # a network holds only this container: it gets its address back
    inet = run(backend, state, "cat /proc/net/fib_trie").stdout.decode()
    assert f"|-- {state['egress_address']}\n" in inet
    assert inside(backend, state, "print(open('/etc/sandhub/ca-bundle.crt').read()[:27])") == (
        "-----BEGIN CERTIFICATE-----"
    )


def test_a_sandbox_from_a_snapshot_gets_its_own_egress(
    backend: DockerBackend, made: list[dict[str, Any]]
) -> None:
    first = backend.provision(egress_spec(PROXY_PORT, DNS_PORT))
    made.append(first)
    run(backend, first, "echo kept > /workspace/file")
    taken = backend.snapshot(first, f"snap_{uuid.uuid4().hex[:12]}", {"org.sandhub.test": "1"})
    try:
        ca = make_ca_pem()
        spec = egress_spec(PROXY_PORT, DNS_PORT, ca, snapshot=taken.state)
        second = backend.provision(spec)
        made.append(second)
        assert run(backend, second, "cat /workspace/file").stdout == b"kept\n"
        assert second["egress_gateway"] != first["egress_gateway"]
        assert second["egress_address"] and second["network"] == f"sandhub-{spec.sandbox_id}"
        assert spec.egress is not None
        proxy = run(backend, second, "echo $HTTP_PROXY").stdout.decode().strip()
        assert proxy == proxy_url(
            spec.sandbox_id, spec.egress.token, second["egress_gateway"], PROXY_PORT
        )
        bundle = inside(backend, second, "print(open('/etc/sandhub/ca-bundle.crt').read())")
        assert bundle.endswith(ca.strip())
    finally:
        backend.delete_snapshot(taken.state)


def test_start_records_a_new_address_the_engine_gives(
    backend: DockerBackend, engine: docker.DockerClient, made: list[dict[str, Any]]
) -> None:
    state = backend.provision(egress_spec(PROXY_PORT, DNS_PORT))
    made.append(state)
    old = state["egress_address"]
    backend.stop(state)
    # While it is stopped, another container takes its address on the network.
    squatter = engine.containers.run(
        IMAGE, "sleep 60", detach=True, network=state["network"], labels={"org.sandhub.test": "1"}
    )
    try:
        squatter.reload()
        assert squatter.attrs["NetworkSettings"]["Networks"][state["network"]]["IPAddress"] == old
        backend.start(state)
        assert state["egress_address"] not in ("", old)
        inet = run(backend, state, "cat /proc/net/fib_trie").stdout.decode()
        assert f"|-- {state['egress_address']}\n" in inet
    finally:
        squatter.remove(force=True)
