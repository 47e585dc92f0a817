"""Limits and robustness: head size, connections per sandbox, clean-up of every connection,
refusal reports."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest

from egress import gate
from tests.egress.conftest import World
from tests.egress.servers import connect, proxied_get, read_answer


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll a condition of the proxy's state (it has no event to await from this thread)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_request_head_over_64_kib_gets_431(world: World):
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        url = f"http://allowed.test:{world.plain.port}/"
        sock.sendall(f"GET {url} HTTP/1.1\r\nX-Big: {'a' * 70_000}\r\n\r\n".encode())
        assert read_answer(sock).startswith(b"HTTP/1.1 431 ")
    assert world.plain.requests == []


def test_connections_are_cleaned_up_after_clients_leave(world: World):
    clients = [socket.create_connection(("127.0.0.1", world.port), timeout=10) for _ in range(3)]
    assert connect(clients[0], "open.test", world.open.port).startswith(b"HTTP/1.1 200 ")
    url = f"http://allowed.test:{world.plain.port}/"
    clients[1].sendall(
        f"GET {url} HTTP/1.1\r\nHost: allowed.test:{world.plain.port}\r\n\r\n".encode()
    )
    assert read_answer(clients[1]).endswith(b"hello from allowed.test")  # kept alive
    clients[2].sendall(b"GET http://allowed.test/ HT")  # a head never finished
    wait_for(lambda: world.proxy.proxy.active_connections == 3)
    assert world.proxy.proxy.per_sandbox["sb-1"] == 2  # the third one is not known yet
    for client in clients:
        client.close()
    wait_for(lambda: world.proxy.proxy.active_connections == 0)
    assert not world.proxy.proxy.per_sandbox


def test_client_leaving_mid_body_ends_the_upstream_request(world: World):
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        url = f"http://allowed.test:{world.plain.port}/upload"
        head = f"POST {url} HTTP/1.1\r\nHost: allowed.test:{world.plain.port}\r\n"
        sock.sendall(f"{head}Content-Length: 1000000\r\n\r\n".encode() + b"x" * 1000)
        wait_for(lambda: world.proxy.proxy.active_connections == 1)
    assert world.plain.cut_short.wait(10)  # the upstream saw its connection end
    wait_for(lambda: world.proxy.proxy.active_connections == 0)


def test_too_many_connections_per_sandbox_are_refused(world: World, monkeypatch):
    monkeypatch.setattr(gate, "MAX_PER_SANDBOX", 2)
    held = [socket.create_connection(("127.0.0.1", world.port), timeout=10) for _ in range(2)]
    try:
        for sock in held:
            assert connect(sock, "open.test", world.open.port).startswith(b"HTTP/1.1 200 ")
        status, _, _ = proxied_get(world.port, f"http://allowed.test:{world.plain.port}/")
        assert status == 429
    finally:
        for sock in held:
            sock.close()
    world.proxy.report_now()
    assert world.source.total() == {("sb-1", "*:0", "too_many_connections"): 1}
    wait_for(lambda: world.proxy.proxy.active_connections == 0)
    status, _, _ = proxied_get(world.port, f"http://allowed.test:{world.plain.port}/")
    assert status == 200


@pytest.mark.parametrize("report_seconds", [0.05])
def test_refusals_are_reported_aggregated_periodically_and_on_stop(world: World):
    for _ in range(3):
        assert proxied_get(world.port, "http://example.com/")[0] == 403
    wait_for(lambda: bool(world.source.reports))
    proxied_get(world.port, "http://example.org/")
    world.proxy.stop()  # the last counts go out on stop
    assert world.source.total() == {
        ("sb-1", "example.com:80", "not_allowed"): 3,
        ("sb-1", "example.org:80", "not_allowed"): 1,
    }
    assert all(count for report in world.source.reports for count in report.values())
