"""Port streams in real Docker sandboxes WITHOUT network (DockerBackend.open_port, through the
sandbox agent): an app started as a background job answers through the platform.

Needs the Docker engine and sandhub/sandbox:latest, as tests/docker/test_agent.py (fixtures:
tests/docker/conftest.py). The apps are stdlib python3 programs in the sandbox: http.server, an echo
server, and a server that pushes bytes until its client goes away.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
import pytest

from hosts.backends.agent import protocol
from hosts.backends.base import PortClosed, PortStream, Unsupported
from hosts.backends.docker import DockerBackend
from hosts.backends.docker.names import container_ref
from tests.docker.helpers import make_spec
from tests.memory import MIB, peak_rss, reset_peak_rss

HTTP_PORT, ECHO_PORT, PUSH_PORT = 8000, 9000, 9100
BIG = 50 * MIB

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

# Pushes bytes to each client until it goes away; then notes how far it got and why.
PUSH_SERVER = """
import socket, sys, threading
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
def push(conn):
    sent = 0
    try:
        while True:
            sent += conn.send(b"z" * 65536)
    except OSError as exc:
        with open("/workspace/pushed", "a") as log:
            log.write(f"{sent} {type(exc).__name__}\\n")
while True:
    threading.Thread(target=push, args=(server.accept()[0],), daemon=True).start()
"""


def sh(backend: DockerBackend, state: dict[str, Any], script: str) -> str:
    result = backend.exec(
        state, ["sh", "-c", script], cwd="/workspace", env={}, timeout=60, output_cap=MIB
    )
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode()


def start_app(backend: DockerBackend, state: dict[str, Any], argv: list[str], port: int) -> None:
    """Start argv as a background job and wait until its port answers."""
    backend.start_background(
        state, argv, cwd="/workspace", env={}, job_id=f"app-{uuid.uuid4().hex[:8]}"
    )
    give_up = time.monotonic() + 30
    while True:
        try:
            backend.open_port(state, port).close()
            return
        except PortClosed:
            assert time.monotonic() < give_up, f"nothing listened on {port} in time"
            time.sleep(0.05)


def read_all(stream: PortStream, pace: Callable[[], None] | None = None) -> bytes:
    got = bytearray()
    while chunk := stream.read(timeout=30):
        got += chunk
        if pace is not None:
            pace()
    return bytes(got)


def http_get(stream: PortStream, path: str) -> None:
    stream.write(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())


def pushed(backend: DockerBackend, state: dict[str, Any]) -> list[str]:
    """The push server's notes: how much it sent each client before it went, and why."""
    return sh(backend, state, "cat pushed 2>/dev/null || true").splitlines()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    give_up = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < give_up, f"gave up waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def served(backend: DockerBackend, engine: docker.DockerClient) -> Any:
    """One sandbox without network, running http.server (a page, and 50 MB of random bytes
    whose digest it computed itself), the echo server and the push server."""
    state = backend.provision(make_spec(network=False))
    try:
        container = engine.containers.get(container_ref(state))
        assert container.attrs["HostConfig"]["NetworkMode"] == "none"
        digest = sh(
            backend,
            state,
            "mkdir -p site && printf 'hello from the sandbox' > site/index.html && "
            f"head -c {BIG} /dev/urandom > site/big.bin && sha256sum site/big.bin",
        ).split()[0]
        http = ["python3", "-m", "http.server", str(HTTP_PORT), "--bind", "127.0.0.1"]
        start_app(backend, state, [*http, "--directory", "/workspace/site"], HTTP_PORT)
        start_app(backend, state, ["python3", "-c", ECHO_SERVER, str(ECHO_PORT)], ECHO_PORT)
        start_app(backend, state, ["python3", "-c", PUSH_SERVER, str(PUSH_PORT)], PUSH_PORT)
        yield state, digest
    finally:
        backend.destroy(state)


def test_a_raw_http_request_is_answered(backend: DockerBackend, served: Any) -> None:
    state, _ = served
    with backend.open_port(state, HTTP_PORT) as stream:
        http_get(stream, "/index.html")
        answer = read_all(stream)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and body == b"hello from the sandbox"


def test_an_echo_round_trip_of_1_mb_is_identical(backend: DockerBackend, served: Any) -> None:
    state, _ = served
    data = os.urandom(MIB)
    with backend.open_port(state, ECHO_PORT) as stream, ThreadPoolExecutor(1) as pool:
        writing = pool.submit(lambda: (stream.write(data), stream.close_write()))
        assert read_all(stream) == data
        writing.result()


def test_50_mb_read_slowly_costs_the_platform_under_10_mb(
    backend: DockerBackend,
    served: Any,
) -> None:
    state, digest = served
    backend.open_port(state, HTTP_PORT).close()  # the agent is up before the baseline
    baseline = reset_peak_rss()
    reads, fullest = [0], [0]

    def slowly() -> None:  # the app writes far faster than this reader takes it
        reads[0] += 1
        fullest[0] = max(fullest[0], stream._buffered)  # type: ignore[attr-defined]
        if reads[0] % 4 == 0:
            time.sleep(0.01)

    hasher, size, head = hashlib.sha256(), 0, b""
    with backend.open_port(state, HTTP_PORT) as stream:
        http_get(stream, "/big.bin")
        while chunk := stream.read(65536, timeout=30):
            if not head:
                head, _, chunk = chunk.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.0 200"), head
            hasher.update(chunk)
            size += len(chunk)
            slowly()
    grown = peak_rss() - baseline  # bytes, as _status_kb gives them
    print(f"50 MB through a port stream: peak RSS grew {grown // 1024} kB in {reads[0]} reads")
    assert size == BIG and hasher.hexdigest() == digest
    # The reader was the slower side (the window filled up), and the window held.
    assert protocol.WINDOW // 2 <= fullest[0] <= protocol.WINDOW
    assert grown < 10 * MIB


def test_nothing_listening_is_port_closed(backend: DockerBackend, served: Any) -> None:
    state, _ = served
    with pytest.raises(PortClosed, match="nothing listens on port 9999 in the sandbox"):
        backend.open_port(state, 9999)


def test_close_mid_transfer_frees_the_request(
    backend: DockerBackend,
    served: Any,
    engine: docker.DockerClient,
) -> None:
    state, _ = served
    client = backend.agents.client(state)
    notes = len(pushed(backend, state))  # the start's probe left one
    stream = backend.open_port(state, PUSH_PORT)
    got = 0
    while got < 4 * protocol.WINDOW:
        got += len(stream.read(timeout=30))
    assert client.ping()["inflight"] == 1
    stream.close()
    stream.close()  # idempotent
    assert stream.read() == b""
    wait_for(lambda: client.ping()["inflight"] == 0 and client.inflight == 0, "the request's end")
    # The app saw its connection go (a broken pipe or a reset) after what it sent.
    wait_for(lambda: len(pushed(backend, state)) > notes, "the app's note")
    sent, reason = pushed(backend, state)[-1].split()
    assert int(sent) >= got and reason in ("BrokenPipeError", "ConnectionResetError")


def test_20_streams_at_once(backend: DockerBackend, served: Any) -> None:
    state, _ = served

    def one(number: int) -> bool:
        data = os.urandom(100_000) + str(number).encode()
        with backend.open_port(state, ECHO_PORT) as stream:
            stream.write(data)
            stream.close_write()
            return read_all(stream) == data

    with ThreadPoolExecutor(20) as pool:
        assert all(pool.map(one, range(20)))
    client = backend.agents.client(state)
    wait_for(lambda: client.ping()["inflight"] == 0, "every request's end")


def test_an_image_without_python3_says_previews_need_it(
    backend: DockerBackend,
    no_python_image: str,
) -> None:
    state = backend.provision(make_spec(image_reference=no_python_image))
    try:
        with pytest.raises(Unsupported, match="previews need python3 in the sandbox's image"):
            backend.open_port(state, HTTP_PORT)
    finally:
        backend.destroy(state)
