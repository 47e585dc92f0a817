"""Explicit proxy clients (HTTP_PROXY/HTTPS_PROXY): CONNECT and absolute-form HTTP, who is
asking (source address, Proxy-Authorization) and what they may reach."""

from __future__ import annotations

import socket
import ssl

import pytest

from tests.egress.conftest import TOKEN, World
from tests.egress.servers import basic, connect, proxied_get, read_answer, tunnel


def test_allowed_name_over_plain_http_reaches_upstream_without_proxy_headers(world: World):
    url = f"http://allowed.test:{world.plain.port}/hello?x=1"
    auth = {"Proxy-Authorization": basic("sb-1", TOKEN), "Proxy-Connection": "keep-alive"}
    status, _, body = proxied_get(world.port, url, auth)
    assert (status, body) == (200, b"hello from allowed.test")
    path, headers, _ = world.plain.requests[-1]
    assert path == "/hello?x=1"  # origin-form upstream
    assert headers["Host"] == f"allowed.test:{world.plain.port}"
    assert "Proxy-Authorization" not in headers and "Proxy-Connection" not in headers


def test_keep_alive_carries_several_requests_each_checked(world: World):
    sock = socket.create_connection(("127.0.0.1", world.port), timeout=10)
    with sock:
        for path in ("/one", "/two"):
            url = f"http://allowed.test:{world.plain.port}{path}"
            sock.sendall(
                f"GET {url} HTTP/1.1\r\nHost: allowed.test:{world.plain.port}\r\n\r\n".encode()
            )
            assert read_answer(sock).endswith(b"hello from allowed.test")
        sock.sendall(b"GET http://elsewhere.test/ HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n")
        assert read_answer(sock).startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert [path for path, _, _ in world.plain.requests] == ["/one", "/two"]


def test_allowed_name_through_connect_reaches_upstream(world: World):
    context = world.client_context(world.upstream_ca)
    with tunnel(world.port, "open.test", world.open.port, context) as sock:
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: open.test\r\nConnection: close\r\n\r\n")
        assert read_answer(sock).endswith(b"hello from open.test")
    assert world.open.requests[-1][0] == "/x"


def test_name_not_on_the_list_is_refused_and_counted(world: World):
    status, headers, body = proxied_get(
        world.port, "http://example.com/", {"X-Token": "do-not-echo-me"}
    )
    assert status == 403
    assert headers["Content-Type"].startswith("text/plain")
    assert body == (
        b"sandhub egress: example.com:80 is not on this sandbox's allow-list (mode allowlist)\n"
    )
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        assert connect(sock, "example.com", 443).startswith(b"HTTP/1.1 403 ")
    world.proxy.report_now()
    assert world.source.total() == {
        ("sb-1", "example.com:80", "not_allowed"): 1,
        ("sb-1", "example.com:443", "not_allowed"): 1,
    }


def test_allowed_name_on_another_port_is_refused(world: World):
    status, _, _ = proxied_get(world.port, "http://allowed.test:1/")
    assert status == 403


def test_raw_ip_is_refused_in_allowlist_mode(world: World):
    status, _, body = proxied_get(world.port, f"http://127.0.0.1:{world.plain.port}/")
    assert status == 403 and b"raw IP" in body
    world.proxy.report_now()
    assert world.source.total() == {("sb-1", f"127.0.0.1:{world.plain.port}", "raw_ip"): 1}
    assert world.plain.requests == []


def test_host_header_must_match_the_url(world: World):
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        url = f"http://allowed.test:{world.plain.port}/"
        sock.sendall(f"GET {url} HTTP/1.1\r\nHost: other.test\r\n\r\n".encode())
        assert read_answer(sock).startswith(b"HTTP/1.1 400 ")
    assert world.plain.requests == []


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no credentials, and the source address names no sandbox
        {"Proxy-Authorization": basic("sb-1", "wrong-token")},
        {"Proxy-Authorization": "Bearer " + TOKEN},
    ],
)
def test_missing_or_wrong_credentials_get_407(world: World, headers: dict[str, str]):
    del world.source.addresses["127.0.0.1"]
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        answer = connect(sock, "open.test", world.open.port, headers)
    assert answer.startswith(b"HTTP/1.1 407 ")
    assert b'Proxy-Authenticate: Basic realm="sandhub"' in answer
    status, _, _ = proxied_get(world.port, f"http://allowed.test:{world.plain.port}/", headers)
    assert status == 407
    assert world.plain.requests == []


def test_token_alone_identifies_the_sandbox(world: World):
    del world.source.addresses["127.0.0.1"]
    auth = {"Proxy-Authorization": basic("sb-1", TOKEN)}
    status, _, body = proxied_get(world.port, f"http://allowed.test:{world.plain.port}/", auth)
    assert (status, body) == (200, b"hello from allowed.test")


def test_token_of_another_sandbox_than_the_source_address_gets_407(world: World):
    world.source.tokens[("sb-2", "token-2")] = world.allowlist("sb-2")
    auth = {"Proxy-Authorization": basic("sb-2", "token-2")}
    status, _, _ = proxied_get(world.port, f"http://allowed.test:{world.plain.port}/", auth)
    assert status == 407


def test_sni_other_than_the_connect_host_is_refused(world: World):
    context = world.client_context(world.upstream_ca)
    with pytest.raises((ssl.SSLError, OSError)):
        # The tunnel is to open.test; the TLS inside claims example.com (domain fronting).
        tunnel(world.port, "open.test", world.open.port, context, server_hostname="example.com")
    world.proxy.report_now()
    assert world.source.total() == {("sb-1", f"open.test:{world.open.port}", "sni_mismatch"): 1}
    assert world.open.requests == []


def test_http_10_request_without_host_gets_one_upstream(world: World):
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        sock.sendall(f"GET http://allowed.test:{world.plain.port}/old HTTP/1.0\r\n\r\n".encode())
        assert read_answer(sock).endswith(b"hello from allowed.test")
    assert world.plain.requests[-1][1]["host"] == f"allowed.test:{world.plain.port}"
