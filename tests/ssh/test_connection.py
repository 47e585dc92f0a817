"""The SSH connection layer against a real OpenSSH server on loopback (tests/ssh/sshd.py)."""

from __future__ import annotations

import base64
import os
import re
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko
import pytest

from hosts.backends.base import BackendError
from hosts.backends.ssh import errors
from hosts.backends.ssh.connection import SshConnection
from hosts.backends.ssh.hostkeys import fetch_host_key, fingerprint
from hosts.backends.ssh.keys import load_private_key
from hosts.backends.ssh.pool import ConnectionPool
from tests.ssh.sshd import LOGINS, Sshd, keygen_fingerprint, running_sshd

pytestmark = pytest.mark.sshd


@pytest.fixture
def own_sshd() -> Iterator[Sshd]:
    """A server of the test's own, for tests that restart, kill or re-key it."""
    with running_sshd() as server:
        yield server


def _new_log(server: Sshd, offset: int) -> str:
    """What sshd logged since `offset`, once every connection opened since has ended
    before login (so whatever the client sent on it has been handled and logged)."""
    give_up = time.monotonic() + 5
    while True:
        log = server.log(offset)
        opened = set(re.findall(r"Connection from \S+ port (\d+)", log))
        ended = set(re.findall(r"port (\d+) \[preauth\]", log))
        if (opened and opened <= ended) or time.monotonic() > give_up:
            assert opened, f"sshd saw no connection: {log}"
            return log
        time.sleep(0.02)


# -- logins ----------------------------------------------------------------------------------


@pytest.mark.parametrize("login", LOGINS)
def test_login(sshd: Sshd, login: str) -> None:
    user = sshd.username.encode()
    with SshConnection(sshd.target(login)) as conn:
        result = conn.run("id -un; echo oops >&2; exit 3", timeout=10)
        assert (result.exit_code, result.stdout, result.stderr) == (3, b"%s\n" % user, b"oops\n")
        assert conn.host_key.fingerprint == sshd.fingerprint and conn.is_alive()
    assert not conn.is_alive()


def test_wrong_password(sshd: Sshd) -> None:
    wrong = "not-" + sshd.password
    with pytest.raises(errors.AuthenticationFailed) as caught:
        SshConnection(sshd.target("password", password=wrong))
    message = str(caught.value)
    assert message.startswith("authentication failed for user sandhub-ssh-test on 127.0.0.1:")
    assert "did not accept the password" in message
    assert wrong not in message and sshd.password not in message


def test_wrong_key(sshd: Sshd) -> None:
    stranger = sshd.stranger_key
    with pytest.raises(errors.AuthenticationFailed) as caught:
        SshConnection(sshd.target(private_key=stranger.text))
    message = str(caught.value)
    # The admin is told which key to add to authorized_keys, never the private part.
    expected = keygen_fingerprint(stranger.path.with_suffix(".pub"))
    assert f"did not accept the private key (ssh-ed25519 {expected})" in message
    assert "PRIVATE KEY" not in message


def test_key_problems_fail_before_any_connection(sshd: Sshd) -> None:
    key = sshd.client_keys["ed25519-passphrase"]
    # The target points at a listener of ours: it must never see a connection.
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    cases = [
        ({"passphrase": "wrong-" + str(key.passphrase)}, "wrong passphrase for the private key"),
        ({"passphrase": None}, "protected by a passphrase, but no passphrase is configured"),
        ({"private_key": "not a key"}, "not a private key in OpenSSH or PEM format"),
    ]
    for changes, expected in cases:
        with pytest.raises(errors.PrivateKeyError) as caught:
            SshConnection(sshd.target("ed25519-passphrase", port=port, **changes))
        assert expected in str(caught.value)
        assert str(key.passphrase) not in str(caught.value)
    with listener, pytest.raises(BlockingIOError):
        listener.accept()


def test_key_formats_load_as_their_type(sshd: Sshd) -> None:
    # A passphrase given for a key without one is ignored (an admin may fill in both).
    names = {}
    for login in ("ed25519", "rsa", "ecdsa"):
        key = sshd.client_keys[login]
        loaded = load_private_key(key.text.replace("\n", "\r\n"), passphrase="unused")
        names[login] = loaded.get_name()
        assert fingerprint(loaded) == keygen_fingerprint(key.path.with_suffix(".pub"))
    assert names == {"ed25519": "ssh-ed25519", "rsa": "ssh-rsa", "ecdsa": "ecdsa-sha2-nistp256"}


# -- host keys -------------------------------------------------------------------------------


def test_fingerprint_is_ssh_keygens(sshd: Sshd) -> None:
    for key_type, file_type in (("ssh-ed25519", "ed25519"), ("ssh-rsa", "rsa")):
        public = sshd.host_key_path(file_type).with_suffix(".pub")
        reference = keygen_fingerprint(public)
        fetched = fetch_host_key(sshd.address, sshd.port, key_type=key_type)
        assert (fetched.key_type, fetched.fingerprint) == (key_type, reference)
        assert fetched.public_key.split() == public.read_text().split()[:2]
        name, blob = fetched.public_key.split()
        parsed = paramiko.PKey.from_type_string(name, base64.b64decode(blob))
        assert fingerprint(parsed) == reference
    # Without a type, the key shown is the one a connection is shown: the pin to confirm.
    assert fetch_host_key(sshd.address, sshd.port).fingerprint == sshd.fingerprint


def test_fetch_host_key_does_not_log_in(sshd: Sshd) -> None:
    offset = sshd.log_path.stat().st_size
    fetch_host_key(sshd.address, sshd.port)
    log = _new_log(sshd, offset)
    assert "Accepted" not in log and "Failed" not in log


def test_unpinned_host_key_is_refused_before_login(sshd: Sshd) -> None:
    offset = sshd.log_path.stat().st_size
    with pytest.raises(errors.HostKeyNotPinned) as caught:
        SshConnection(sshd.target("password", fingerprint=None))
    assert str(caught.value).startswith(
        f"host key not confirmed for 127.0.0.1:{sshd.port}: fetch and confirm fingerprint "
        f"{sshd.fingerprint} (ssh-ed25519) in admin"
    )
    assert caught.value.fingerprint == sshd.fingerprint
    log = _new_log(sshd, offset)
    assert "password" not in log and "Accepted" not in log


def test_pin_of_another_key_type(sshd: Sshd) -> None:
    rsa = sshd.host_fingerprints["ssh-rsa"]
    with SshConnection(sshd.target(fingerprint=rsa, host_key_type="ssh-rsa")) as conn:
        assert conn.host_key.key_type == "ssh-rsa" and conn.run("true", timeout=10).ok
    # The RSA pin without its type: the server shows its Ed25519 key, which is not the pin.
    with pytest.raises(errors.HostKeyChanged):
        SshConnection(sshd.target(fingerprint=rsa))


def test_changed_host_key_refuses_to_connect(own_sshd: Sshd) -> None:
    old = own_sshd.fingerprint
    target = own_sshd.target("password")
    SshConnection(target).close()
    own_sshd.rotate_host_keys()
    offset = own_sshd.log_path.stat().st_size
    with pytest.raises(errors.HostKeyChanged) as caught:
        SshConnection(target)
    error = caught.value
    assert (error.expected, error.actual) == (old, own_sshd.fingerprint) and old != error.actual
    assert f"host key of 127.0.0.1:{own_sshd.port} changed: expected {old}" in str(error)
    assert f"the host presented {own_sshd.fingerprint}" in str(error)
    assert "refusing to connect" in str(error)
    log = _new_log(own_sshd, offset)
    assert "password" not in log and "Accepted" not in log


def test_errors_are_backend_errors() -> None:
    for name in errors.__dict__:
        cls = getattr(errors, name)
        if isinstance(cls, type) and cls.__module__ == errors.__name__:
            assert issubclass(cls, errors.SshError) and issubclass(cls, BackendError), name


# -- unreachable hosts -----------------------------------------------------------------------


def test_closed_port_is_unreachable(sshd: Sshd) -> None:
    with socket.create_server(("127.0.0.1", 0)) as spare:
        port = spare.getsockname()[1]
    with pytest.raises(errors.SshUnreachable) as caught:
        SshConnection(sshd.target(port=port))
    assert str(caught.value) == (
        f"cannot reach 127.0.0.1:{port}: connection refused (is sshd running on that port?)"
    )


@pytest.mark.parametrize("answer", [b"HTTP/1.1 400 Bad Request\r\n\r\n", None])
def test_not_an_ssh_server(sshd: Sshd, answer: bytes | None) -> None:
    """Something that is not sshd (or says nothing at all) fails within the timeout."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        accepted: list[socket.socket] = []

        def serve() -> None:
            peer, _ = listener.accept()
            accepted.append(peer)
            if answer is not None:
                peer.sendall(answer)
                peer.close()

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        started = time.monotonic()
        with pytest.raises(errors.SshUnreachable) as caught:
            SshConnection(sshd.target(port=port), connect_timeout=1.0)
        assert time.monotonic() - started < 5
        server.join(5)
        for peer in accepted:
            peer.close()
    assert str(caught.value).startswith(f"SSH handshake with 127.0.0.1:{port} failed: ")


# -- commands and channels -------------------------------------------------------------------


def test_run_stdin_caps_and_signals(sshd: Sshd) -> None:
    with SshConnection(sshd.target()) as conn:
        assert conn.run("cat", stdin=b"one\ntwo\n", timeout=10).stdout == b"one\ntwo\n"
        big = bytes(range(256)) * 4096  # 1 MiB: fed from a thread while output is read
        echoed = conn.run("cat", stdin=big, timeout=30, max_output=2 * len(big))
        assert echoed.stdout == big and not echoed.stdout_truncated
        capped = conn.run("head -c 5000000 /dev/zero; echo done >&2", timeout=30, max_output=1000)
        assert (capped.exit_code, capped.stdout, capped.stderr) == (0, b"\0" * 1000, b"done\n")
        assert capped.stdout_truncated and not capped.stderr_truncated
        assert conn.run("cat", timeout=10).stdout == b""  # stdin is closed, not left open
        assert conn.run("kill -9 $$", timeout=10).exit_code is None


def test_run_timeout_is_bounded(sshd: Sshd) -> None:
    with SshConnection(sshd.target()) as conn:
        started = time.monotonic()
        with pytest.raises(errors.SshTimeout) as caught:
            conn.run("sleep 30", timeout=0.5)
        assert time.monotonic() - started < 3
        assert str(caught.value).endswith(f"{sshd.port} did not finish within 0.5 s")
        assert conn.run("echo still usable", timeout=10).stdout == b"still usable\n"


def test_open_channel_streams(sshd: Sshd) -> None:
    with SshConnection(sshd.target()) as conn:
        channel = conn.open_channel()
        channel.exec_command("while read line; do echo got $line; done")
        channel.settimeout(10)
        for word in ("a", "b"):
            channel.sendall(f"{word}\n".encode())
            assert channel.recv(100) == f"got {word}\n".encode()
        channel.shutdown_write()
        assert channel.recv_exit_status() == 0
        channel.close()


def test_tcp_nodelay_is_set_and_closing_is_final(sshd: Sshd) -> None:
    with SshConnection(sshd.target()) as conn:
        assert conn.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    with pytest.raises(errors.SshConnectionLost, match="connection to 127.0.0.1:.* was closed"):
        conn.run("true", timeout=5)


def test_twenty_threads_share_one_connection(sshd: Sshd) -> None:
    """More sessions at once than sshd's MaxSessions (10): the rest wait for a free one."""
    with SshConnection(sshd.target()) as conn:
        barrier = threading.Barrier(20)

        def echo(n: int) -> bytes:
            barrier.wait(10)
            return conn.run(f"sleep 0.2; echo {n}", timeout=30).stdout

        with ThreadPoolExecutor(20) as workers:
            outputs = list(workers.map(echo, range(20)))
    assert outputs == [f"{n}\n".encode() for n in range(20)]


# -- the pool, restarts and crashes ----------------------------------------------------------


def test_pool_reuses_and_reconnects_after_restart(own_sshd: Sshd) -> None:
    pool = ConnectionPool(check_after=0)  # every reuse after any idle time is proven first
    target = own_sshd.target()
    try:
        first = pool.get(target)
        assert pool.get(target) is first and len(pool) == 1
        assert first.run("echo 1", timeout=10).stdout == b"1\n"
        own_sshd.restart()
        second = pool.get(target)
        assert second is not first and not first.is_alive()
        assert second.run("echo 2", timeout=10).stdout == b"2\n"
        pool.drop(target)
        assert len(pool) == 0 and not second.is_alive()
        third = pool.get(target)
        child = os.fork()
        if child == 0:  # a worker process: its own connection, the parent's left alone
            code = 1
            try:
                code = 0 if len(pool) == 0 and pool.get(target).run("true", timeout=10).ok else 1
            finally:
                os._exit(code)
        assert os.waitpid(child, 0)[1] == 0 and third.run("echo 3", timeout=10).ok
        pool.close_all()
        assert not third.is_alive() and len(pool) == 0
    finally:
        pool.close_all()


def test_killed_sshd_fails_the_command_then_comes_back(own_sshd: Sshd) -> None:
    pool = ConnectionPool(connect_timeout=3)
    target = own_sshd.target()
    outcome: list[BaseException] = []
    with tempfile.TemporaryDirectory() as scratch:
        Path(scratch).chmod(0o777)
        marker = Path(scratch, "started")

        def long_command() -> None:
            try:
                pool.get(target).run(f"touch {marker}; sleep 60", timeout=120)
            except BaseException as exc:
                outcome.append(exc)

        runner = threading.Thread(target=long_command)
        runner.start()
        give_up = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < give_up:
            time.sleep(0.01)
        assert marker.exists(), "the command never started"
        killed_at = time.monotonic()
        own_sshd.kill()
        runner.join(10)
    assert not runner.is_alive() and time.monotonic() - killed_at < 5
    assert isinstance(outcome[0], errors.SshConnectionLost), outcome
    assert str(outcome[0]).startswith(f"the connection to 127.0.0.1:{own_sshd.port} was lost")
    with pytest.raises(errors.SshUnreachable, match="connection refused"):
        pool.get(target)
    own_sshd.start()
    try:
        assert pool.get(target).run("echo back", timeout=10).stdout == b"back\n"
    finally:
        pool.close_all()


def test_round_trip_with_tcp_nodelay(sshd: Sshd) -> None:
    """`run("echo hi")` on a pooled connection; Nagle's delay would make it ~45 ms."""
    pool = ConnectionPool()
    try:
        conn = pool.get(sshd.target())
        conn.run("true", timeout=10)
        times = []
        for _ in range(200):
            started = time.perf_counter()
            assert pool.get(sshd.target()).run("echo hi", timeout=10).stdout == b"hi\n"
            times.append(time.perf_counter() - started)
    finally:
        pool.close_all()
    median = statistics.median(times) * 1000
    print(f"\nrun('echo hi') over SSH, pooled, TCP_NODELAY: median {median:.2f} ms, "
          f"p90 {statistics.quantiles(times, n=10)[-1] * 1000:.2f} ms (200 runs)")  # fmt: skip
    assert median < 25, f"median {median:.1f} ms: is TCP_NODELAY lost?"


def test_run_waits_for_a_session_held_elsewhere(sshd: Sshd) -> None:
    """Streams from open_channel() fill sshd's MaxSessions (10): run() waits for one."""
    with SshConnection(sshd.target()) as conn:
        held = [conn.open_channel() for _ in range(10)]
        with pytest.raises(errors.SshTimeout, match="refused new sessions for 0.5 s"):
            conn.run("true", timeout=0.5)
        with ThreadPoolExecutor(1) as worker:
            pending = worker.submit(conn.run, "echo through", timeout=10)
            time.sleep(0.3)
            assert not pending.done()
            held.pop().close()
            assert pending.result(10).stdout == b"through\n"
        for channel in held:
            channel.close()


def test_sessions_ending_while_others_write(sshd: Sshd) -> None:
    """Sessions ending while their stdin or EOF is sent (paramiko #1115): without ordering.py,
    sshd dropped the whole connection within these 1000 commands, 7 runs out of 7."""
    with SshConnection(sshd.target()) as conn:

        def burst(n: int) -> list[int | None]:
            commands = ("true", "echo hi")
            return [conn.run(commands[i % 2], stdin=b"x" * (i % 3), timeout=30).exit_code
                    for i in range(100)]  # fmt: skip

        with ThreadPoolExecutor(10) as workers:
            codes = [code for batch in workers.map(burst, range(10)) for code in batch]
        assert codes == [0] * 1000 and conn.is_alive()
