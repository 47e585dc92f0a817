"""Two tenants' egress sandboxes on ONE isolated SSH host (a real sshd on loopback whose login
user may `sudo -n`: a Unix user, namespaces and an egress chain per sandbox): each reaches the
egress proxy with its own credential only, and neither can read the other's.

The proxy credential (the token in HTTP_PROXY) is not a secret from its own sandbox, but it
is one from every other: it travels to the sandbox's processes over the agent's stdin, so it
is in no argv on the host, and another sandbox's /proc and files do not show it. The needle
a sandbox looks for reaches it in a file (reversed, removed once read), never in the argv of
the looking command.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hosts.backends.ssh.backend import SshBackend
from tests.leftovers import remove_sandboxes_under
from tests.ssh.egress_stage import (
    StandIn,
    backend_for,
    basic,
    egress_spec,
    inside,
    make_ca,
    probe,
)
from tests.ssh.helpers import wait_for
from tests.ssh.logins import SUDO_USER
from tests.ssh.sshd import Sshd

pytestmark = [pytest.mark.sshd]

SEARCHED = "/tmp /var/tmp /dev/shm /run /etc/sandhub /workspace"


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.close()


@pytest.fixture(scope="module")
def shared(server: Sshd) -> Iterator[SshBackend]:
    """The shared host, as its sudo login user; what a failed run left is removed after."""
    base = Path(f"/var/tmp/sandhub-egress-{secrets.token_hex(4)}")
    ssh = backend_for(server, SUDO_USER, str(base))
    assert ssh.facts().isolated, ssh.facts().isolation_missing
    yield ssh
    ssh.close()
    remove_sandboxes_under(base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def tenants(shared: SshBackend, stand_in: StandIn) -> Iterator[dict[str, dict[str, Any]]]:
    """Tenant A's and tenant B's sandboxes, each with its own token; A runs a long job."""
    ca, made = make_ca(), {}
    try:
        for name in ("a", "b"):
            spec = egress_spec(stand_in.port, ca)
            state = shared.provision(spec)
            state["test_token"] = spec.egress.token if spec.egress else ""
            made[name] = state
        yield made
    finally:
        for state in made.values():
            shared.destroy(state)


def host_argv_holding(needle: str) -> list[str]:
    """The host's processes whose command line holds `needle` (read as root, so all)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if needle.encode() in Path(entry.path, "cmdline").read_bytes():
                    found.append(entry.name)
            except OSError:
                continue
    return found


def find_in(backend: SshBackend, state: dict[str, Any], needle: str) -> list[str]:
    """Where, in the sandbox's /proc (environ, cmdline) and its files, `needle` is found."""
    name = f"needle-{secrets.token_hex(4)}"
    inside(backend, state, f"cat > {name}", stdin=needle[::-1].encode())
    return probe(backend, state, "find", name, SEARCHED)["found"]


def test_b_cannot_read_as_proxy_token(shared: SshBackend, tenants: dict[str, dict[str, Any]]):
    a, b = tenants["a"], tenants["b"]
    job = shared.start_background(
        a, ["sh", "-c", 'echo "$HTTP_PROXY" > proxy.txt; exec sleep 300'],
        cwd="/workspace", env={}, job_id=f"holder-{secrets.token_hex(3)}",
    )  # fmt: skip
    try:
        wait_for(lambda: "proxy.txt" in inside(shared, a, "ls"), what="A's job to start")
        # A sees its own token (its processes' environment, its file): the search works.
        seen_by_a = find_in(shared, a, a["test_token"])
        assert "/workspace/proxy.txt" in seen_by_a and any(
            path.endswith("/environ") for path in seen_by_a
        ), seen_by_a
        assert find_in(shared, b, a["test_token"]) == []
        assert a["test_token"] not in inside(shared, b, "env")
        # Nowhere in an argv on the host (where no tenant looks, but the login user does).
        assert host_argv_holding(a["test_token"]) == []
        assert host_argv_holding(b["test_token"]) == []
    finally:
        shared.cancel_background(a, job)


def test_each_tenant_reaches_the_proxy_with_its_own_credential_only(
    shared: SshBackend, tenants: dict[str, dict[str, Any]], stand_in: StandIn
):
    stand_in.seen.clear()
    for name in ("a", "b"):
        answer = probe(shared, tenants[name], "get", f"http://{name}.allowed.test/")["answer"]
        assert answer.startswith("200 stand-in"), answer
    expected = [
        (basic(tenants[name]["sandbox_id"], tenants[name]["test_token"]),
         f"GET http://{name}.allowed.test/ HTTP/1.1")
        for name in ("a", "b")
    ]  # fmt: skip
    assert stand_in.seen == expected
