"""Two teams' sandboxes on ONE SSH host are as separate as Docker sandboxes (issue 23).

A red-team run put team A's and team B's sandboxes on one shared SSH host (a real sshd, the
login user allowed `sudo -n`, a Unix user per sandbox, no systemd) and found each failure
below; each is a test here, failing on the code of that run and passing once a sandbox on an
SSH host runs in namespaces (network, PID, IPC, UTS, mount) and a cgroup of its own, with a
disk of its own and a destroy that never follows a tenant's links as root:

1. loopback and IPC shared: B's loopback listener and abstract Unix socket reached from A; A
   listening first on B's port made B's deploy_app fail;
2. secrets in argv: `ps` and /proc in A showed B's create-time environment and command lines,
   and every process of the host;
3. /tmp and /dev/shm shared;
4. root deleting what a tenant chose: destroy's `find ... | xargs rm -rf` as root, raced
   with a renameat2(RENAME_EXCHANGE) loop of the attacker's other sandbox, deleted a
   root-owned file outside every sandbox;
5. limits per process, not per sandbox: memory (5 x 300 MB under 512 MB), CPU (cpus=1.0 used
   two cores), disk (no quota on the workspace, nor on /dev/shm);
6. network: an SSH sandbox reached a Docker sandbox's bridge address, the host's loopback
   and addresses; a sandbox without network had the host's interfaces;
7. signals: B's processes were visible to A (kill answered EPERM, not ESRCH).

The sandboxes are made through the services by two teams (tests/conftest.py `world`) on one
registered host (ssh_tenants.py), except where the backend is the point (the destroy race,
the Docker sandbox). Every address a test connects to is this machine's; every listener is
one a test started. Secrets travel to the looking sandbox in a file, never in its argv.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings

from hosts.backends.base import LABEL_INSTANCE, EgressSpec, SandboxSpec
from hosts.backends.docker import DockerBackend
from hosts.models import Host
from sandboxes import services
from tests.engine import engine_cleaning_up
from tests.live import free_port
from tests.security.ssh_tenants import (
    HostListener,
    IsolationHost,
    Pair,
    host_addresses,
    host_pid_of,
    probe,
    run,
    running_on_host,
    stop_quietly,
    wait_for,
)
from tests.ssh.egress_stage import make_ca
from tests.ssh.helpers import new_id

pytestmark = [pytest.mark.sshd]

DOCKER_INSTANCE = f"pytest-iso-{uuid.uuid4().hex[:8]}"
RACE_TRIES = 20
RACE_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")  # where destroy looks for the user's files


@pytest.fixture(scope="module")
def listeners() -> Iterator[tuple[HostListener, HostListener]]:
    """Two listeners of the test process: on the host's loopback, and on all its addresses."""
    loopback, anywhere = HostListener("127.0.0.1"), HostListener("0.0.0.0")
    yield loopback, anywhere
    loopback.close()
    anywhere.close()


@pytest.fixture
def engine():
    """The local Docker engine (this marks the test `docker`, tests/markers.py); whatever a
    failed test left under this module's instance label is removed."""
    with engine_cleaning_up(DOCKER_INSTANCE) as client:
        yield client


# -- helpers -----------------------------------------------------------------------------------


def fetch_through_port(stage: IsolationHost, sandbox_id: str, port: int, path: str) -> str:
    """GET `path` from the sandbox's port through the backend's port stream (as previews do)."""
    state = stage.state(sandbox_id)
    chunks = []
    with stage.backend().open_port(state, port, timeout=10) as stream:
        stream.write(f"GET {path} HTTP/1.0\r\nHost: sandbox\r\n\r\n".encode())
        while chunk := stream.read(65536, timeout=10):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def site(principal, sandbox_id: str, text: str) -> str:
    """A directory of the sandbox's workspace holding whoami.txt = text; its name."""
    name = f"site-{secrets.token_hex(4)}"
    services.write_file(principal, sandbox_id, f"{name}/whoami.txt", text)
    return name


def serve(directory: str, port: int) -> str:
    # Unbuffered: a deploy that fails shows in its log whether the server got to listen.
    return f"exec python3 -u -m http.server {port} --bind 127.0.0.1 --directory {directory}"


def connected(outcomes: dict[str, str]) -> dict[str, str]:
    return {target: said for target, said in outcomes.items() if said == "connected"}


def answered_here(targets: list[str], *listeners: HostListener) -> None:
    """Each target answers a connection from the test process itself (so a sandbox's failure
    to connect is the sandbox's, not a dead listener's); the listeners then forget those."""
    for target in targets:
        address, port = target.rsplit(":", 1)
        socket.create_connection((address, int(port)), timeout=3).close()
    wait_for(
        lambda: sum(len(listener.peers) for listener in listeners) >= len(targets),
        "the listeners to accept the test's own connections",
        timeout=10,
    )
    for listener in listeners:
        listener.peers.clear()


# -- 1. loopback and IPC -----------------------------------------------------------------------


def test_a_listener_on_bs_loopback_is_unreachable_from_a(pair: Pair):
    stage, alice, bob = pair.stage, pair.stage.alice, pair.stage.bob
    page = f"team B's page {secrets.token_hex(8)}"
    port = free_port()
    directory = site(bob, pair.b, page)
    services.deploy_app(bob, pair.b, command=serve(directory, port), port=port, wait_seconds=60)
    try:
        assert page in fetch_through_port(stage, pair.b, port, "/whoami.txt")  # B's own preview
        seen = probe(alice, pair.a, "http", f"http://127.0.0.1:{port}/whoami.txt")
        assert not seen["ok"], (
            f"team A's sandbox read team B's listener on 127.0.0.1:{port} (B's loopback): "
            f"{seen['body']!r}"
        )
        assert page not in seen["error"]
    finally:
        stop_quietly(bob, pair.b, port=port)


def test_bs_abstract_unix_socket_is_unreachable_from_a(pair: Pair):
    alice, bob = pair.stage.alice, pair.stage.bob
    name = f"sandhub-iso-{secrets.token_hex(6)}"
    said = f"team-B-{secrets.token_hex(6)}"
    job = services.start_background(
        bob, pair.b, f"exec python3 isoprobe.py serve_abstract {name} {said}"
    )
    try:
        wait_for(lambda: probe(bob, pair.b, "unix", name)["ok"], "B's abstract socket to answer B")
        seen = probe(alice, pair.a, "unix", name)
        assert not seen["ok"], (
            f"team A's sandbox connected to team B's abstract Unix socket @{name}: "
            f"it said {seen['said']!r}"
        )
    finally:
        stop_quietly(bob, pair.b, job=job.id)


def test_a_listening_first_on_bs_port_does_not_stop_b(pair: Pair):
    stage, alice, bob = pair.stage, pair.stage.alice, pair.stage.bob
    a_page, b_page = f"team A's app {secrets.token_hex(8)}", f"team B's app {secrets.token_hex(8)}"
    port = free_port()
    a_dir, b_dir = site(alice, pair.a, a_page), site(bob, pair.b, b_page)
    services.deploy_app(alice, pair.a, command=serve(a_dir, port), port=port, wait_seconds=60)
    try:
        assert a_page in fetch_through_port(stage, pair.a, port, "/whoami.txt")
        try:
            services.deploy_app(bob, pair.b, command=serve(b_dir, port), port=port, wait_seconds=60)
        except services.DeployFailed as exc:
            pytest.fail(
                f"team B could not deploy on port {port} because team A's sandbox listened "
                f"there first: {exc}",
                pytrace=False,
            )
        through_b = fetch_through_port(stage, pair.b, port, "/whoami.txt")
        assert b_page in through_b and a_page not in through_b, through_b
        assert a_page in fetch_through_port(stage, pair.a, port, "/whoami.txt")
    finally:
        stop_quietly(bob, pair.b, port=port)
        stop_quietly(alice, pair.a, port=port)


# -- 2. ps and /proc -----------------------------------------------------------------------------


def test_ps_and_proc_in_a_show_nothing_of_b(pair: Pair):
    stage, alice, bob = pair.stage, pair.stage.alice, pair.stage.bob
    argv_secret = secrets.token_hex(16)
    b_user = stage.state(pair.b)["user"]
    job = services.start_background(
        bob, pair.b, f"exec python3 -c 'import time; time.sleep(600)' {argv_secret}"
    )
    try:
        wait_for(lambda: host_pid_of(argv_secret), "B's long command to run on the host")
        # B's agent (started when the sandbox was made) has just run that command: it runs.
        needles = {
            "B's create-time environment (BLUE_CREATE_SECRET)": pair.b_create_secret,
            "the argv of B's command": argv_secret,
            "B's Unix user": b_user,
        }
        services.write_file(alice, pair.a, "needles.txt", "\n".join(needles.values()) + "\n")
        view = probe(alice, pair.a, "view", "needles.txt")
        leaks = [
            f"{what} shows in team A's sandbox, in {', '.join(view['hits'][str(i)][:6])}"
            for i, what in enumerate(needles)
            if view["hits"][str(i)]
        ]
        # The namespace's init (pid 1) may be the sandbox's launcher; nothing else is foreign.
        foreign = [process for process in view["others"] if process[0] != 1]
        if foreign:
            leaks.append(
                f"team A's sandbox (uid {view['uid']}) sees {view['others_count']} processes of "
                f"other users (pid, uid, name), e.g. {foreign[:8]}; ps shows the users "
                f"{view['ps_users'][:12]}"
            )
        assert not leaks, "\n".join(leaks)
    finally:
        stop_quietly(bob, pair.b, job=job.id)


# -- 3. /tmp and /dev/shm ------------------------------------------------------------------------


def test_tmp_and_dev_shm_are_not_shared(pair: Pair):
    alice, bob = pair.stage.alice, pair.stage.bob
    name = f"iso-{secrets.token_hex(6)}"
    paths = [f"/tmp/{name}", f"/dev/shm/{name}"]
    wrote = run(bob, pair.b, " && ".join(f"echo team-B > {p} && cat {p}" for p in paths))
    try:
        assert wrote.exit_code == 0 and wrote.stdout.split() == ["team-B", "team-B"], wrote
        seen = run(alice, pair.a, "; ".join(f"if [ -e {p} ]; then echo {p}; fi" for p in paths))
        assert seen.exit_code == 0, seen
        visible = seen.stdout.split()
        assert not visible, f"team A's sandbox sees the files team B's sandbox wrote: {visible}"
    finally:
        run(bob, pair.b, f"rm -f {' '.join(paths)}")


# -- 6. network --------------------------------------------------------------------------------


def test_an_ssh_sandbox_cannot_reach_a_docker_sandboxs_bridge_address(pair: Pair, engine):
    alice = pair.stage.alice
    docker = DockerBackend(Host(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL))
    spec = SandboxSpec(
        sandbox_id=new_id(),
        image_reference=settings.SANDHUB_SANDBOX_IMAGE,
        cpus=0.5,
        memory_mb=256,
        pids_limit=64,
        network=True,
        # Network goes with an egress policy (issue 27); nothing here connects to the proxy.
        egress=EgressSpec(mode="public", proxy_port=9, dns_port=9, token="t", ca_pem=make_ca()),
        labels={LABEL_INSTANCE: DOCKER_INSTANCE, "org.sandhub.team": "beta"},
    )
    state = docker.provision(spec)
    try:
        docker.start_background(
            state,
            ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0"],
            cwd="/workspace",
            env={},
            job_id="iso-listener",
        )
        attrs = engine.containers.get(state["container_name"]).attrs
        (network,) = attrs["NetworkSettings"]["Networks"].values()
        target = f"{network['IPAddress']}:8080"

        def answers() -> bool:  # from this machine itself: the Docker sandbox serves
            with contextlib.suppress(OSError):
                socket.create_connection((network["IPAddress"], 8080), timeout=2).close()
                return True
            return False

        wait_for(answers, f"the Docker sandbox's listener on {target}")
        reached = connected(probe(alice, pair.a, "tcp", 3, target))
        assert not reached, (
            f"team A's SSH sandbox (network on) connected to a Docker sandbox's bridge "
            f"address {target}"
        )
    finally:
        docker.destroy(state)
        docker.close()


def test_an_ssh_sandbox_with_network_cannot_reach_the_hosts_loopback_or_addresses(
    pair: Pair, listeners: tuple[HostListener, HostListener]
):
    alice = pair.stage.alice
    loopback, anywhere = listeners
    targets = [f"127.0.0.1:{loopback.port}", f"127.0.0.1:{anywhere.port}"]
    targets += [f"{address}:{anywhere.port}" for address in host_addresses()]
    answered_here(targets, loopback, anywhere)
    reached = sorted(connected(probe(alice, pair.a, "tcp", 3, *targets, timeout=60)))
    assert not reached, f"team A's SSH sandbox (network on) reached the host's listeners {reached}"
    assert loopback.peers == [] and anywhere.peers == []


def test_an_ssh_sandbox_without_network_has_only_a_loopback(
    pair: Pair, listeners: tuple[HostListener, HostListener]
):
    stage, bob = pair.stage, pair.stage.bob
    loopback, anywhere = listeners
    box = stage.create(bob, network=False)
    devices = run(bob, box, "cat /proc/net/dev")
    assert devices.exit_code == 0, devices
    names = sorted(line.split(":")[0].strip() for line in devices.stdout.splitlines()[2:])
    assert names == ["lo"], f"a sandbox with network=False has the interfaces {names}"
    targets = [f"127.0.0.1:{loopback.port}"]
    targets += [f"{address}:{anywhere.port}" for address in host_addresses()]
    answered_here(targets, loopback, anywhere)
    reached = sorted(connected(probe(bob, box, "tcp", 3, *targets, timeout=60)))
    assert not reached, f"a sandbox without network reached the host's listeners {reached}"
    assert loopback.peers == [] and anywhere.peers == []


# -- 7. signals ----------------------------------------------------------------------------------


def test_bs_processes_cannot_be_seen_or_signalled_from_a(pair: Pair):
    alice, bob = pair.stage.alice, pair.stage.bob
    token = f"iso-sleeper-{secrets.token_hex(6)}"
    job = services.start_background(
        bob, pair.b, f"exec python3 -c 'import time; time.sleep(600)' {token}"
    )
    try:
        pid = wait_for(lambda: host_pid_of(token), "B's long command to run on the host")
        said = probe(alice, pair.a, "kill", pid)
        assert running_on_host(pid), f"team A's sandbox killed team B's process {pid}: {said}"
        assert said == {"probe": "ESRCH", "kill": "ESRCH"}, (
            f"team B's process {pid} is there for team A's sandbox: kill(pid, 0) answered "
            f"{said['probe']} and kill(pid, SIGKILL) {said['kill']} (ESRCH: no such process)"
        )
    finally:
        stop_quietly(bob, pair.b, job=job.id)
