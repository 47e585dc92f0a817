"""Port streams on SSH hosts (SshBackend.open_port), against a real sshd on loopback (fixtures
in tests/ssh/conftest.py): through the sandbox agent, which connects only to a listener
of the sandbox's own user; through a direct-tcpip channel where the host has no python3 and
no per-sandbox users; refused where it has per-sandbox users but no python3.

The host's loopback is this machine's: apps listen on free ports of it. The agent is made
unavailable as tests/ssh/test_plain.py does (a python that is not installed).
"""

from __future__ import annotations

import os
import pwd
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from hosts.backends.agent.ports import AgentPortStream
from hosts.backends.base import PortClosed, PortStream, Unsupported
from hosts.backends.ssh.backend import SshBackend
from hosts.backends.ssh.hostprobe import HostFacts
from hosts.backends.ssh.ports import ChannelPortStream
from tests.ssh.helpers import make_backend
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd

MIB = 1024 * 1024

ECHO_SERVER = """
import socket, sys, threading
server = socket.create_server(("127.0.0.1", int(sys.argv[1])), backlog=64)
def echo(conn):
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
"""


@pytest.fixture
def backend(sshd: Sshd, base_dir: str) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=True)
    yield ssh
    ssh.close()


@pytest.fixture
def plain(sshd: Sshd, base_dir: str) -> Iterator[SshBackend]:
    ssh = make_backend(sshd, base_dir, agent=False)
    yield ssh
    ssh.close()


def facts(sshd: Sshd, *, per_sandbox_users: bool) -> HostFacts:
    return HostFacts(
        login_user=sshd.username,
        uid=pwd.getpwnam(sshd.username).pw_uid,
        sudo=per_sandbox_users,
        systemd=False,
        python3="",
        tools=("useradd", "userdel", "setpriv"),
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_echo(backend: SshBackend, state: dict[str, Any]) -> int:
    """The echo server as the sandbox's background job; its port, once it answers."""
    port = free_port()
    job_id = f"echo-{secrets.token_hex(4)}"
    argv = ["python3", "-c", ECHO_SERVER, str(port)]
    backend.start_background(state, argv, cwd="/workspace", env={}, job_id=job_id)
    give_up = time.monotonic() + 30
    while True:
        try:
            backend.open_port(state, port).close()
            return port
        except PortClosed:
            assert time.monotonic() < give_up, f"nothing listened on {port} in time"
            time.sleep(0.05)


def round_trip(stream: PortStream, data: bytes) -> bytes:
    with stream, ThreadPoolExecutor(1) as pool:
        writing = pool.submit(lambda: (stream.write(data), stream.close_write()))
        got = bytearray()
        while chunk := stream.read(timeout=30):
            got += chunk
        writing.result()
    return bytes(got)


def test_through_the_agent(
    backend: SshBackend,
    make_sandbox: Callable[..., dict[str, Any]],
) -> None:
    state = make_sandbox()
    port = start_echo(backend, state)
    stream = backend.open_port(state, port)
    assert isinstance(stream, AgentPortStream)
    data = os.urandom(MIB)
    assert round_trip(stream, data) == data
    with ThreadPoolExecutor(10) as pool:
        streams = pool.map(lambda _: backend.open_port(state, port), range(10))
        assert all(round_trip(s, b"x" * 1000) == b"x" * 1000 for s in streams)
    unused = free_port()
    with pytest.raises(PortClosed, match=f"nothing listens on port {unused} in the sandbox"):
        backend.open_port(state, unused)


def test_another_sandbox_users_listener_is_refused(
    backend: SshBackend,
    plain: SshBackend,
    make_sandbox: Callable[..., dict[str, Any]],
    sshd: Sshd,
) -> None:
    mine, theirs = make_sandbox(own_user=True), make_sandbox(own_user=True)
    assert mine["user"] != theirs["user"]
    port = start_echo(backend, theirs)  # listens as their user, on the shared loopback
    assert round_trip(backend.open_port(theirs, port), b"theirs") == b"theirs"
    with pytest.raises(PortClosed, match=f"port {port} is not this sandbox's"):
        backend.open_port(mine, port)
    # Without the agent, nothing could tell whose listener it is: refused outright.
    with pytest.raises(Unsupported, match="need python3 on the host"):
        plain.open_port(mine, port)
    with pytest.raises(Unsupported, match="need python3 on the host"):
        plain.open_port(theirs, port)


def test_direct_tcpip_on_a_host_without_python3_nor_per_sandbox_users(
    plain: SshBackend,
    make_sandbox: Callable[..., dict[str, Any]],
    sshd: Sshd,
) -> None:
    plain._facts = facts(sshd, per_sandbox_users=False)
    state = make_sandbox()
    port = start_echo(plain, state)
    stream = plain.open_port(state, port)
    assert isinstance(stream, ChannelPortStream)
    data = os.urandom(MIB)
    assert round_trip(stream, data) == data
    with pytest.raises(TimeoutError), plain.open_port(state, port) as idle:
        idle.read(timeout=0.2)  # the echo server says nothing first
    unused = free_port()
    with pytest.raises(PortClosed, match=f"nothing listens on port {unused}"):
        plain.open_port(state, unused)
    # The same host once it has per-sandbox users: a port may be another team's.
    plain._facts = facts(sshd, per_sandbox_users=True)
    with pytest.raises(Unsupported, match="users of their own"):
        plain.open_port(state, port)
