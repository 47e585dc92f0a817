"""Secrets bound to destinations: the proxy intercepts TLS for those hosts only and puts the
real value on requests; the sandbox only ever holds the placeholder."""

from __future__ import annotations

import http.client
import ssl

import pytest

from tests.egress.conftest import SECRET, TOKEN, World
from tests.egress.servers import basic, https_get, proxied_get, tunnel


def issuer(sock: ssl.SSLSocket) -> str:
    certificate = sock.getpeercert()
    assert certificate is not None
    return dict(item[0] for item in certificate["issuer"])["commonName"]


def test_bound_secret_reaches_the_upstream_over_intercepted_https(world: World):
    context = world.client_context(world.proxy_ca)  # the sandbox trusts the deployment CA
    with tunnel(world.port, "secret.test", world.secret.port, context) as sock:
        assert issuer(sock) == "Sandhub test deployment CA"  # the proxy's leaf, verified
        sent = {
            "Authorization": f"Bearer {SECRET.placeholder}",
            "X-Echo": f"key={SECRET.placeholder}",
            "Connection": "close",
        }
        answer = https_get(sock, "secret.test", "/v1/models", sent)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"hello from secret.test")
    assert SECRET.value.encode() not in answer  # nothing the proxy answers shows it
    path, received, _ = world.secret.requests[-1]
    assert path == "/v1/models"
    assert received["Authorization"] == SECRET.value  # replaced, not appended
    assert received["X-Echo"] == f"key={SECRET.value}"


def test_keep_alive_inside_intercepted_tls(world: World):
    context = world.client_context(world.proxy_ca)
    with tunnel(world.port, "secret.test", world.secret.port, context) as sock:
        for path in ("/a", "/b"):
            assert https_get(sock, "secret.test", path, {}).endswith(b"hello from secret.test")
    assert [(path, headers["Authorization"]) for path, headers, _ in world.secret.requests] == [
        ("/a", SECRET.value),
        ("/b", SECRET.value),
    ]


def test_placeholder_sent_to_an_unbound_host_arrives_unchanged(world: World):
    url = f"http://allowed.test:{world.plain.port}/"
    status, _, _ = proxied_get(world.port, url, {"X-Key": SECRET.placeholder})
    assert status == 200
    received = world.plain.requests[-1][1]
    assert received["X-Key"] == SECRET.placeholder
    assert SECRET.value not in str(received)


def test_unbound_https_host_is_passed_through_untouched(world: World):
    # The client trusts only the upstream's own CA: an intercepted connection would fail.
    context = world.client_context(world.upstream_ca)
    with tunnel(world.port, "open.test", world.open.port, context) as sock:
        assert issuer(sock) == "Upstream test CA"
        sent = {"Authorization": f"Bearer {SECRET.placeholder}", "Connection": "close"}
        assert https_get(sock, "open.test", "/", sent).endswith(b"hello from open.test")
    assert world.open.requests[-1][1]["Authorization"] == f"Bearer {SECRET.placeholder}"


def test_upstream_failing_verification_closes_the_client(world: World):
    # The proxy trusts only the system store here: the test upstream's certificate fails.
    world.proxy.proxy.upstream_context = ssl.create_default_context()
    context = world.client_context(world.proxy_ca)
    with (
        pytest.raises((ssl.SSLError, OSError)),
        tunnel(world.port, "secret.test", world.secret.port, context) as sock,
    ):
        https_get(sock, "secret.test", "/", {})
    world.proxy.report_now()
    assert world.source.total() == {("sb-1", f"secret.test:{world.secret.port}", "upstream_tls"): 1}
    assert world.secret.requests == []


def test_python_http_client_through_the_proxy_with_the_deployment_ca(world: World):
    """A real client (http.client's tunnel: CONNECT as HTTP/1.0, no Host header)."""
    context = world.client_context(world.proxy_ca)
    connection = http.client.HTTPSConnection("127.0.0.1", world.port, context=context, timeout=10)
    auth = {"Proxy-Authorization": basic("sb-1", TOKEN)}
    connection.set_tunnel("secret.test", world.secret.port, headers=auth)
    try:
        connection.request("GET", "/models", headers={"Authorization": SECRET.placeholder})
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"hello from secret.test")
    finally:
        connection.close()
    assert world.secret.requests[-1][1]["Authorization"] == SECRET.value
