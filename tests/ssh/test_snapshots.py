"""Snapshots of SSH sandboxes on a real sshd with real sudo (hosts/backends/ssh/snapshots.py):
an isolated sandbox's disk copied with its cgroup and filesystem frozen, a directory copied
for one without isolation; root's and closed to every sandbox user; a sandbox started from
one gets its files as its own user's; moved between hosts as a tar stream in bounded memory;
deleted, nothing is left."""

from __future__ import annotations

import dataclasses
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hosts.backends.base import LABEL_INSTANCE, BackendError
from hosts.backends.ssh import layout, snapshots
from hosts.backends.ssh.backend import target_for
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.hostprobe import HostFacts
from hosts.backends.ssh.provision import destroy, provision
from sandboxes import services
from sandboxes.contract.errors import NotFound
from sandboxes.models import Snapshot
from tests.memory import MIB, peak_rss, reset_peak_rss
from tests.ssh import helpers
from tests.ssh.helpers import INSTANCE, sh

pytestmark = pytest.mark.sshd
LABELS = {LABEL_INSTANCE: INSTANCE}
Login = tuple[SshConnection, HostFacts]


def new_snapshot_id() -> str:
    return "snap_" + secrets.token_hex(6)


@pytest.fixture
def made(base: str) -> Iterator[Callable[..., dict[str, Any]]]:
    """provision() on a login, destroyed after the test."""
    states: list[tuple[SshConnection, dict[str, Any]]] = []

    def make(login: Login, **changes: Any) -> dict[str, Any]:
        conn, facts = login
        spec = dataclasses.replace(helpers.spec(), **{"network": False, "disk_mb": 64, **changes})
        states.append((conn, provision(conn, facts, spec, base, INSTANCE)))
        return states[-1][1]

    yield make
    for conn, state in states:
        destroy(conn, state)


def as_sandbox(conn: SshConnection, state: dict[str, Any], script: str) -> str:
    return sh(conn, layout.as_sandbox(state, script, cwd="/workspace"))


def test_an_isolated_sandbox_from_a_snapshot(sudo_isolated: Login, base: str, made) -> None:
    conn, _ = sudo_isolated
    source = made(sudo_isolated)
    as_sandbox(conn, source, "mkdir d && echo hello > d/a.txt && chmod 600 d/a.txt && ln -s d l")
    as_sandbox(conn, source, "head -c 2000000 /dev/urandom > big.bin")
    digest = as_sandbox(conn, source, "sha256sum big.bin")
    taken = snapshots.take(conn, source, base, new_snapshot_id(), LABELS)
    snap = taken.state["dir"]
    assert taken.state["form"] == "image" and taken.state["disk_mb"] == 64
    assert 2_000_000 < taken.size_bytes < 40 * MIB
    assert sh(conn, f"stat -c '%a %U' {snap} {snap}/..", root=True) == "700 root\n700 root\n"
    # Not reachable from inside any sandbox: the base is hidden, the directory closed.
    said = conn.run(layout.as_sandbox(source, f"ls {snap} 2>&1; ls -A {base}"), timeout=30)
    assert said.stdout.decode().splitlines()[-1] == source["sandbox_id"]  # its own alone
    assert b"No such file" in said.stdout
    as_sandbox(conn, source, "echo changed > d/a.txt")  # the source runs on

    fork = made(sudo_isolated, snapshot=taken.state)
    assert fork["uid"] != source["uid"]
    assert as_sandbox(conn, fork, "cat d/a.txt; stat -c '%a %u' d/a.txt") == (
        f"hello\n600 {fork['uid']}\n"
    )
    assert as_sandbox(conn, fork, "sha256sum big.bin") == digest
    assert as_sandbox(conn, fork, "readlink l; echo more >> d/a.txt && echo ok") == "d\nok\n"
    assert as_sandbox(conn, source, "cat d/a.txt") == "changed\n"

    snapshots.delete(conn, taken.state, base)
    assert sh(conn, f"ls -A {base}/.snapshots", root=True) == ""
    snapshots.delete(conn, taken.state, base)  # idempotent
    with pytest.raises(BackendError, match="64 MB disk"):
        made(sudo_isolated, snapshot=taken.state, disk_mb=128)


def test_a_command_running_through_an_isolated_snapshot_goes_on(
    sudo_isolated: Login, base: str, made
) -> None:
    conn, _ = sudo_isolated
    source = made(sudo_isolated)
    script = "for i in $(seq 1 300); do echo line-$i >> count.txt; sleep 0.01; done; echo done"
    result: dict[str, Any] = {}
    writer = threading.Thread(target=lambda: result.update(out=as_sandbox(conn, source, script)))
    writer.start()
    try:
        as_sandbox(conn, source, "until [ -s count.txt ]; do sleep 0.01; done")
        taken = snapshots.take(conn, source, base, new_snapshot_id(), LABELS)
    finally:
        writer.join(timeout=60)
    assert result["out"] == "done\n"
    assert as_sandbox(conn, source, "wc -l < count.txt") == "300\n"
    fork = made(sudo_isolated, snapshot=taken.state)
    lines = as_sandbox(conn, fork, "cat count.txt").splitlines()
    assert 0 < len(lines) < 300 and lines == [f"line-{i}" for i in range(1, len(lines) + 1)]
    snapshots.delete(conn, taken.state, base)


@pytest.mark.parametrize("login", ["sudo", "plain"])
def test_a_sandbox_without_isolation_keeps_its_directory(
    request: pytest.FixtureRequest, login: str, base: str, made
) -> None:
    """Its own user (sudo, no bubblewrap), or the login user's own (no sudo)."""
    conn, facts = request.getfixturevalue(login)
    source = made((conn, facts))
    assert not source["isolated"] and source["own_user"] == (login == "sudo")
    as_sandbox(conn, source, "mkdir -p d/e && echo kept > d/e/f.txt && chmod 640 d/e/f.txt")
    taken = snapshots.take(conn, source, base, new_snapshot_id(), LABELS)
    assert taken.state["form"] == "dir" and taken.state["root"] == (login == "sudo")
    fork = made((conn, facts), snapshot=taken.state)
    assert as_sandbox(conn, fork, "cat d/e/f.txt; stat -c '%a %U' d/e/f.txt") == (
        f"kept\n640 {fork['user']}\n"
    )
    snapshots.delete(conn, taken.state, base)


def test_a_snapshot_moves_between_hosts_in_bounded_memory(
    sudo_isolated: Login, base: str, made
) -> None:
    """Two hosts of the kind: two base directories on this sshd (the stream is the same)."""
    conn, _ = sudo_isolated
    source = made(sudo_isolated, disk_mb=128)
    as_sandbox(conn, source, "head -c 50000000 /dev/urandom > big.bin")
    digest = as_sandbox(conn, source, "sha256sum big.bin")
    taken = snapshots.take(conn, source, base, new_snapshot_id(), LABELS)
    other_base = base + "-other"
    baseline = reset_peak_rss()
    stream = snapshots.export(conn, taken.state, base)
    try:
        copy = snapshots.import_(conn, other_base, new_snapshot_id(), LABELS, stream, root=True)
    finally:
        stream.close()  # type: ignore[attr-defined]
    grown = peak_rss() - baseline
    print(f"a 50 MB snapshot moved over SSH: peak RSS grew {grown // 1024} kB")
    assert grown < 10 * MIB
    assert copy.state["form"] == "image" and copy.state["disk_mb"] == 128
    assert copy.size_bytes < 2 * taken.size_bytes  # holes stay holes
    listed = snapshots.managed(conn, other_base, sudo=True)
    assert [(r.label_id, r.instance) for r in listed] == [(copy.state["snapshot_id"], INSTANCE)]
    facts = sudo_isolated[1]
    spec = dataclasses.replace(helpers.spec(), network=False, disk_mb=128, snapshot=copy.state)
    fork = provision(conn, facts, spec, other_base, INSTANCE)
    try:
        assert as_sandbox(conn, fork, "sha256sum big.bin") == digest
    finally:
        destroy(conn, fork)
        snapshots.delete(conn, copy.state, other_base)
        snapshots.delete(conn, taken.state, base)
        sh(conn, f"rm -rf {other_base}", root=True)


# -- through the services, on an isolated host -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_snapshot_and_fork_through_the_services(pinned, as_alice, as_bob, base: str) -> None:
    assert pinned.isolated
    source = services.create_sandbox(as_alice, disk_mb=64)
    services.write_file(as_alice, source.id, "notes/a.txt", "from the source\n")
    snap, fork = services.fork_sandbox(as_alice, source.id, name="branch", keep_snapshot=True)
    assert snap is not None
    assert snap.host == pinned.name and snap.host_kind == "ssh" and snap.disk_mb == 64
    assert fork.disk_mb == 64 and fork.host == pinned.name
    read = services.read_file(as_alice, fork.id, "notes/a.txt")
    assert read.content == b"from the source\n"
    with pytest.raises(NotFound, match=f"snapshot {snap.id} not found"):
        services.create_sandbox(as_bob, snapshot=snap.id)
    services.delete_snapshot(as_alice, snap.id)
    with SshConnection(target_for(pinned)) as conn:
        assert sh(conn, f"ls -A {base}/.snapshots", root=True) == ""
    kept, branch = services.fork_sandbox(as_alice, source.id)  # its snapshot not kept
    assert kept is None and services.list_snapshots(as_alice) == []
    read = services.read_file(as_alice, branch.id, "notes/a.txt")
    assert read.content == b"from the source\n"
    with SshConnection(target_for(pinned)) as conn:
        assert sh(conn, f"ls -A {base}/.snapshots", root=True) == ""
    for sandbox_id in (source.id, fork.id, branch.id):
        services.delete_sandbox(as_alice, sandbox_id)
    assert Snapshot.objects.get(public_id=snap.id).status == "deleted"
