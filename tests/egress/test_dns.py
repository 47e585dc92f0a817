"""The DNS a sandbox gets: names it may reach answer the proxy's address; everything else is
REFUSED and counted."""

from __future__ import annotations

import socket

import dns.message
import dns.rcode
import dns.rdatatype

from tests.egress.conftest import DNS_ANSWER, World


def ask(world: World, name: str, kind: str) -> dns.message.Message:
    query = dns.message.make_query(name, kind)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        sock.sendto(query.to_wire(), ("127.0.0.1", world.proxy.dns_port))
        data, _ = sock.recvfrom(4096)
    response = dns.message.from_wire(data)
    assert response.id == query.id
    return response


def test_allowed_name_answers_the_proxy_address(world: World):
    response = ask(world, "Allowed.Test.", "A")
    assert response.rcode() == dns.rcode.NOERROR
    [rrset] = response.answer
    assert rrset.rdtype == dns.rdatatype.A and rrset.ttl == 5
    assert [item.address for item in rrset] == [DNS_ANSWER]


def test_aaaa_for_an_allowed_name_is_empty(world: World):
    response = ask(world, "allowed.test", "AAAA")
    assert (response.rcode(), response.answer) == (dns.rcode.NOERROR, [])


def test_other_names_and_types_are_refused_and_counted(world: World):
    assert ask(world, "example.com", "A").rcode() == dns.rcode.REFUSED
    assert ask(world, "example.com", "A").rcode() == dns.rcode.REFUSED
    assert ask(world, "allowed.test", "TXT").rcode() == dns.rcode.REFUSED
    world.proxy.report_now()
    assert world.source.total() == {
        ("sb-1", "example.com:53", "dns"): 2,
        ("sb-1", "allowed.test:53", "dns"): 1,
    }


def test_unknown_source_gets_refused_uncounted(world: World):
    del world.source.addresses["127.0.0.1"]
    assert ask(world, "allowed.test", "A").rcode() == dns.rcode.REFUSED
    world.proxy.report_now()
    assert world.source.reports == []


def test_no_dns_answer_configured_refuses(world: World):
    world.source.addresses["127.0.0.1"] = world.allowlist(dns_answer="")
    assert ask(world, "allowed.test", "A").rcode() == dns.rcode.REFUSED


def test_malformed_packets_are_ignored(world: World):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"\x00\x01garbage", ("127.0.0.1", world.proxy.dns_port))
    # The server is still there for the next query.
    assert ask(world, "allowed.test", "A").rcode() == dns.rcode.NOERROR
