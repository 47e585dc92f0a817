"""The proxy's parts on their own: rules, address ranges, the ClientHello parser, the CA."""

from __future__ import annotations

import socket
import ssl

import pytest

from egress.ca import CertificateAuthority, generate_ca
from egress.policy import BoundSecret, SandboxPolicy, parse_rule
from egress.ranges import parse_ranges, refused_address
from egress.redirect import original_port
from egress.tls import NotClientHello, parse_client_hello


@pytest.mark.parametrize(
    ("text", "pattern", "ports"),
    [
        ("pypi.org", "pypi.org", frozenset()),
        ("  PyPI.org. ", "pypi.org", frozenset()),
        ("*.pythonhosted.org:443", "*.pythonhosted.org", frozenset({443})),
        ("github.com:22,443", "github.com", frozenset({22, 443})),
        ("*", "*", frozenset()),
        ("10.1.2.3:8080", "10.1.2.3", frozenset({8080})),
        ("[2001:db8::1]:443", "2001:db8::1", frozenset({443})),
    ],
)
def test_parse_rule(text: str, pattern: str, ports: frozenset[int]):
    rule = parse_rule(text)
    assert (rule.pattern, rule.ports) == (pattern, ports)


@pytest.mark.parametrize(
    "text",
    ["", "pypi.org:0", "pypi.org:http", "pypi.org:70000", "a b.com", "*.", "x.*.com", "-a.com"],
)
def test_parse_rule_refuses_bad_input(text: str):
    with pytest.raises(ValueError):
        parse_rule(text)


def test_rule_matching():
    wildcard = parse_rule("*.pythonhosted.org")
    assert wildcard.allows("files.pythonhosted.org", 443)
    assert wildcard.allows("a.b.pythonhosted.org.", 80)
    assert not wildcard.allows("pythonhosted.org", 443)  # not the name itself
    assert not wildcard.allows("evilpythonhosted.org", 443)
    assert not wildcard.allows("files.pythonhosted.org", 8443)  # default ports 80, 443
    assert parse_rule("github.com:22").allows("GitHub.com", 22)
    assert not parse_rule("github.com:22").allows("github.com", 443)


def test_allowlist_never_lets_a_wildcard_match_a_raw_address():
    policy = SandboxPolicy("sb", "allowlist", rules=(parse_rule("*"),))
    assert policy.allows("anything.example", 443)
    assert not policy.allows("93.184.216.34", 443)
    exact = SandboxPolicy("sb", "allowlist", rules=(parse_rule("93.184.216.34"),))
    assert exact.allows("93.184.216.34", 443)


def test_secrets_for_a_host():
    secret = BoundSecret("K", ("api.openai.com", "*.anthropic.com"), "x-api-key", "v", "p")
    policy = SandboxPolicy("sb", "public", secrets=(secret,))
    assert policy.secrets_for("API.openai.com") == (secret,)
    assert policy.secrets_for("console.anthropic.com") == (secret,)
    assert policy.secrets_for("openai.com") == ()


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "127.0.0.1",
        "0.0.0.0",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",
        "224.0.0.1",
        "240.0.0.1",
        "192.0.0.8",
        "198.18.0.1",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:10.0.0.1",  # an IPv4-mapped private address
        "::ffff:127.0.0.1",
        "not an address",
    ],
)
def test_refused_addresses(address: str):
    assert refused_address(address)


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"])
def test_public_addresses(address: str):
    assert not refused_address(address)


def test_allowed_ranges_open_a_refused_range_only():
    allowed = parse_ranges(["10.20.0.0/16", "not a cidr"])
    assert not refused_address("10.20.3.4", allowed)
    assert refused_address("10.21.3.4", allowed)


def client_hello(server_name: str | None) -> bytes:
    """The bytes Python's TLS client sends first."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    if server_name is None:
        context.check_hostname = False
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_client_hello_server_name():
    hello = client_hello("Files.Example.org")
    parsed = parse_client_hello(hello + b"rest")
    assert parsed is not None
    assert (parsed.sni, parsed.size) == ("files.example.org", len(hello))
    assert parse_client_hello(hello[:-1]) is None  # more bytes needed
    assert parse_client_hello(client_hello(None)).sni is None  # type: ignore[union-attr]


def test_not_a_client_hello():
    with pytest.raises(NotClientHello):
        parse_client_hello(b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(NotClientHello):
        parse_client_hello(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00")  # a ServerHello


def test_leaf_certificates_verify_against_the_ca(tmp_path):
    cert_pem, key_pem = generate_ca("Test CA")
    authority = CertificateAuthority(cert_pem, key_pem)
    assert authority.server_context("a.example") is authority.server_context("A.example.")
    (tmp_path / "ca.pem").write_text(cert_pem)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    for name in ("a.example", "10.0.0.1"):
        server = authority.server_context(name)
        assert handshake(client, server, name)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(client, authority.server_context("a.example"), "b.example")


def handshake(client: ssl.SSLContext, server: ssl.SSLContext, name: str) -> bool:
    """A TLS handshake between two memory BIO pairs; raises what verification raises."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    tls_client = client.wrap_bio(c_in, c_out, server_hostname=name)
    tls_server = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        done = 0
        for tls, out, peer_in in ((tls_client, c_out, s_in), (tls_server, s_out, c_in)):
            try:
                tls.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
            peer_in.write(out.read())
        if done == 2:
            return True
    return False


def test_a_connection_not_redirected_has_no_original_port():
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname()),
    ):
        accepted, _ = listener.accept()
        with accepted:
            assert original_port(accepted) is None
