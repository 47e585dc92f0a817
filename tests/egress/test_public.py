"""Public mode: any name and port, but never a private, loopback or own address unless an
admin allowed the range (or the operator mapped the name)."""

from __future__ import annotations

import socket

from egress.resolver import Resolver
from tests.egress.conftest import World
from tests.egress.servers import basic, connect, proxied_get

PUBLIC = {"Proxy-Authorization": basic("sb-pub", "token-pub")}


def public(world: World, **changes: object) -> None:
    policy = world.allowlist("sb-pub", mode="public", rules=(), **changes)
    world.source.tokens[("sb-pub", "token-pub")] = policy
    del world.source.addresses["127.0.0.1"]  # the token names the sandbox


def test_a_name_resolving_to_loopback_is_refused(world: World):
    public(world)
    # "localhost" is not in the override map: resolved by the system, to 127.0.0.1.
    status, _, body = proxied_get(world.port, f"http://localhost:{world.plain.port}/", PUBLIC)
    assert status == 403 and b"may not reach" in body
    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
        assert connect(sock, "localhost", world.open.port, PUBLIC).startswith(b"HTTP/1.1 403 ")
    world.proxy.report_now()
    assert world.source.total() == {
        ("sb-pub", f"localhost:{world.plain.port}", "private_address"): 1,
        ("sb-pub", f"localhost:{world.open.port}", "private_address"): 1,
    }
    assert world.plain.requests == []


def test_raw_loopback_address_is_refused(world: World):
    public(world)
    status, _, _ = proxied_get(world.port, f"http://127.0.0.1:{world.plain.port}/", PUBLIC)
    assert status == 403
    assert world.plain.requests == []


def test_an_allowed_range_is_reached(world: World):
    public(world, allowed_ranges=("127.0.0.0/8", "::1/128"))
    status, _, body = proxied_get(world.port, f"http://localhost:{world.plain.port}/", PUBLIC)
    assert (status, body) == (200, b"hello from allowed.test")


def test_operator_mapped_names_are_trusted(world: World):
    public(world)
    status, _, _ = proxied_get(world.port, f"http://allowed.test:{world.plain.port}/", PUBLIC)
    assert status == 200


class NothingResolves(Resolver):
    def resolve(self, name: str) -> list[str]:
        return []  # what getaddrinfo gives for a name that does not exist (no query sent)


def test_unresolvable_name_gets_502_and_is_counted(world: World):
    public(world)
    world.proxy.proxy.resolver = NothingResolves()
    status, _, _ = proxied_get(world.port, "http://no-such-name.invalid/", PUBLIC)
    assert status == 502
    world.proxy.report_now()
    assert world.source.total() == {("sb-pub", "no-such-name.invalid:80", "unresolvable"): 1}
