"""Probing an SSH host and finding what this instance made there (hosts.backends.ssh.hostprobe)
for real, through a real sshd on loopback: with sudo and the fake nvidia-smi's two GPUs,
without either, over a closed connection; list_managed for per-sandbox users and a shared one.
Fixtures: tests/ssh/conftest.py; users: tests/ssh/logins.py; helpers: tests/ssh/helpers.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.hostprobe import facts_from_details, list_managed, probe
from hosts.backends.ssh.provision import destroy, provision
from tests.ssh.helpers import INSTANCE, new_id, spec, timed, user_exists
from tests.ssh.logins import PLAIN_USER, run_here

pytestmark = pytest.mark.sshd


def test_probe_with_sudo_and_gpus(sudo_isolated, base):
    sudo_conn, sudo_facts = sudo_isolated
    provision(sudo_conn, sudo_facts, spec(), base, INSTANCE)
    result, took = timed(probe, sudo_conn, base_dir=base)
    assert result.healthy, result.error
    assert 0 <= result.cpu_percent <= 100 and 0 < result.memory_percent <= 100
    assert result.sandboxes_running == 1
    details = result.details
    assert details["sudo"] is True and details["per_sandbox_users"] is True
    # This machine has bubblewrap, slirp4netns, iptables, cgroups and user namespaces.
    assert details["isolated"] is True and details["isolation_missing"] == [], details["facts"]
    assert details["facts"]["isolated"] is True and sudo_facts.isolated
    assert details["systemd"] is os.path.isdir("/run/systemd/system")
    assert details["python3"] is True and details["cpu_count"] == os.cpu_count()
    assert [g["index"] for g in details["gpus"]] == [0, 1]
    idle, busy = details["gpus"]
    assert idle["busy_percent"] < busy["busy_percent"] and "H100" in idle["name"]
    assert result.gpu_percent is not None and details["gpu_error"] == ""
    assert facts_from_details(details) == sudo_facts
    print(f"\nprobe: {took} (0.2 s of it the cpu sampling pause)")
    facts = {k: v for k, v in details["facts"].items() if k != "tools"}
    print(f"facts: {facts}\ntools: {' '.join(details['facts']['tools'])}")


def test_probe_without_sudo_nor_gpus_and_of_a_closed_connection(plain, base, server):
    result = probe(plain[0], base_dir=base)
    assert result.healthy, result.error
    assert result.details["sudo"] is False and result.details["per_sandbox_users"] is False
    assert result.details["isolated"] is False
    assert result.details["isolation_missing"] == ["no sudo -n: no per-sandbox users"]
    assert result.details["gpus"] == [] and result.gpu_percent is None
    assert result.sandboxes_running == 0 and facts_from_details(result.details) == plain[1]
    closed = SshConnection(server.target(username=PLAIN_USER))
    closed.close()
    result = probe(closed)  # reports, never raises
    assert not result.healthy and "closed" in result.error


@pytest.mark.parametrize("own", [True, False], ids=["own-user", "shared-user"])
def test_list_managed_finds_ours_only(own, request, base):
    conn, facts = request.getfixturevalue("sudo" if own else "plain")
    before = time.time()
    ours = [provision(conn, facts, spec(), base, INSTANCE) for _ in range(2)]
    pool = provision(conn, facts, spec(new_id("wp_")), base, INSTANCE)
    theirs = provision(conn, facts, spec(), base, "another-instance")
    Path(base, "not-a-sandbox").mkdir()
    found = list_managed(conn, base, INSTANCE, sudo=facts.sudo)
    directories = {r.label_id: r for r in found if r.kind == "directory"}
    assert set(directories) == {s["sandbox_id"] for s in [*ours, pool]}
    assert directories[pool["sandbox_id"]].pool and not directories[ours[0]["sandbox_id"]].pool
    for resource in directories.values():
        assert resource.instance == INSTANCE and before - 2 <= resource.created_at <= time.time()
        assert resource.state["own_user"] is own
    users = {r.label_id for r in found if r.kind == "user"}
    assert users == (set(directories) if own else set())
    # What reconciliation does with an orphan: destroy() each of its resources' state.
    for resource in [r for r in found if r.label_id == ours[0]["sandbox_id"]]:
        destroy(conn, resource.state)
    assert not os.path.lexists(ours[0]["dir"])
    assert user_exists(conn, ours[0]["user"]) is not own  # the login user stays
    assert os.path.isdir(theirs["dir"])
    if own:  # its user gone (a destroy cut short): still known as its own, still removable
        run_here("userdel", ours[1]["user"])
    left = list_managed(conn, base, INSTANCE, sudo=facts.sudo)
    assert {r.label_id for r in left} == {ours[1]["sandbox_id"], pool["sandbox_id"]}
    (second,) = [r for r in left if r.label_id == ours[1]["sandbox_id"]]
    assert second.kind == "directory" and second.state["own_user"] is own
    destroy(conn, second.state)
    assert not os.path.lexists(ours[1]["dir"])
