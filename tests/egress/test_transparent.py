"""Transparent clients (the firewall redirected a connection meant for the gateway, the
address DNS gave them): TLS goes where its SNI says, HTTP where its Host header says."""

from __future__ import annotations

import socket
import ssl

import pytest

from egress import redirect
from tests.egress.conftest import SECRET, World
from tests.egress.servers import https_get, read_answer


def redirected_to(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    """What SO_ORIGINAL_DST would say had an iptables REDIRECT brought the client here."""
    monkeypatch.setattr(redirect, "original_port", lambda sock: port)


def transparent_tls(world: World, server_name: str, cafile) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", world.port), timeout=10)
    return world.client_context(cafile).wrap_socket(sock, server_hostname=server_name)


def test_tls_goes_where_its_sni_says(world: World, monkeypatch):
    redirected_to(monkeypatch, world.open.port)
    with transparent_tls(world, "open.test", world.upstream_ca) as sock:
        answer = https_get(sock, "open.test", "/t", {"Connection": "close"})
    assert answer.endswith(b"hello from open.test")
    assert world.open.requests[-1][0] == "/t"


def test_tls_to_a_secret_bound_host_is_intercepted(world: World, monkeypatch):
    redirected_to(monkeypatch, world.secret.port)
    with transparent_tls(world, "secret.test", world.proxy_ca) as sock:
        https_get(sock, "secret.test", "/", {"Connection": "close"})
    assert world.secret.requests[-1][1]["Authorization"] == SECRET.value


def test_tls_to_a_name_not_on_the_list_is_closed_and_counted(world: World, monkeypatch):
    redirected_to(monkeypatch, 443)
    with pytest.raises((ssl.SSLError, OSError)):
        transparent_tls(world, "example.com", world.upstream_ca)
    world.proxy.report_now()
    assert world.source.total() == {("sb-1", "example.com:443", "not_allowed"): 1}


def test_tls_without_sni_is_refused(world: World, monkeypatch):
    redirected_to(monkeypatch, world.open.port)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with pytest.raises((ssl.SSLError, OSError)):
        sock = socket.create_connection(("127.0.0.1", world.port), timeout=10)
        context.wrap_socket(sock)  # no server_hostname: no SNI
    world.proxy.report_now()
    assert world.source.total() == {("sb-1", f"-:{world.open.port}", "no_sni"): 1}


def test_http_goes_where_its_host_header_says(world: World):
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        host = f"allowed.test:{world.plain.port}"
        sock.sendall(f"GET /page HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert read_answer(sock).endswith(b"hello from allowed.test")
    assert world.plain.requests[-1][0] == "/page"


def test_http_port_comes_from_the_redirection_when_host_has_none(world: World, monkeypatch):
    redirected_to(monkeypatch, world.plain.port)
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        sock.sendall(b"GET /p HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        assert read_answer(sock).endswith(b"hello from allowed.test")


def test_http_refusal_closes_without_an_answer(world: World):
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
        assert sock.recv(1024) == b""
    world.proxy.report_now()
    assert world.source.total() == {("sb-1", "example.com:80", "not_allowed"): 1}


def test_transparent_clients_are_known_by_address_only(world: World):
    del world.source.addresses["127.0.0.1"]
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        host = f"allowed.test:{world.plain.port}"
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert sock.recv(1024) == b""
    assert world.plain.requests == []
