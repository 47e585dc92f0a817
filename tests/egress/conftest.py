"""Fixtures of the egress proxy tests: a ProxyThread over a dict policy source, with upstream
servers on loopback that the resolver's override map names. Nothing here uses the database
(tests/markers.py marks these tests no_database)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from egress.ca import CertificateAuthority, generate_ca
from egress.policy import BoundSecret, SandboxPolicy, parse_rule
from egress.resolver import Resolver
from egress.server import EgressProxy
from egress.thread import ProxyThread
from tests.egress.servers import DictSource, Upstream, serving

SECRET = BoundSecret(
    name="API_KEY",
    hosts=("secret.test",),
    header="Authorization",
    value="Bearer real-secret-value",
    placeholder="sandhub-secret-0123456789",
)
DNS_ANSWER = "192.0.2.53"
TOKEN = "token-of-sb-1"


@dataclass
class World:
    proxy: ProxyThread
    source: DictSource
    plain: Upstream  # http://allowed.test:<port>
    secret: Upstream  # https://secret.test:<port> (a secret is bound to it)
    open: Upstream  # https://open.test:<port> (no secret: passed through)
    proxy_ca: Path  # the deployment CA (what sandboxes trust)
    upstream_ca: Path  # the CA of the upstream test servers

    @property
    def port(self) -> int:
        return self.proxy.port

    def allowlist(self, sandbox_id: str = "sb-1", **changes: object) -> SandboxPolicy:
        """The allow-list policy of the tests: the three upstreams on their ports."""
        ports = f"{self.plain.port},{self.secret.port},{self.open.port}"
        fields: dict[str, object] = {
            "sandbox_id": sandbox_id,
            "mode": "allowlist",
            "rules": tuple(
                parse_rule(f"{name}:{ports}")
                for name in ("allowed.test", "secret.test", "open.test")
            ),
            "secrets": (SECRET,),
            "dns_answer": DNS_ANSWER,
        }
        fields.update(changes)
        return SandboxPolicy(**fields)  # type: ignore[arg-type]

    def client_context(self, cafile: Path) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(cafile))


def upstream_context(ca: CertificateAuthority, host: str) -> ssl.SSLContext:
    context = ca.server_context(host)
    context.set_alpn_protocols(["http/1.1"])
    return context


@pytest.fixture
def report_seconds() -> float:
    """The proxy's report period (a test parametrizes it to see periodic reports)."""
    return 3600.0


@pytest.fixture
def world(tmp_path: Path, report_seconds: float) -> Iterator[World]:
    proxy_cert, proxy_key = generate_ca("Sandhub test deployment CA")
    upstream_cert, upstream_key = generate_ca("Upstream test CA")
    (tmp_path / "proxy-ca.pem").write_text(proxy_cert)
    (tmp_path / "upstream-ca.pem").write_text(upstream_cert)
    upstream_ca = CertificateAuthority(upstream_cert, upstream_key)
    overrides = {name: "127.0.0.1" for name in ("allowed.test", "secret.test", "open.test")}
    source = DictSource()
    proxy = EgressProxy(
        source,
        resolver=Resolver(overrides),
        ca=CertificateAuthority(proxy_cert, proxy_key),
        upstream_cafile=str(tmp_path / "upstream-ca.pem"),
        report_seconds=report_seconds,
    )
    with (
        serving("allowed.test") as plain,
        serving("secret.test", upstream_context(upstream_ca, "secret.test")) as secret,
        serving("open.test", upstream_context(upstream_ca, "open.test")) as open_,
    ):
        thread = ProxyThread(proxy, host="127.0.0.1", dns_host="127.0.0.1").start()
        world = World(
            thread,
            source,
            plain,
            secret,
            open_,
            tmp_path / "proxy-ca.pem",
            tmp_path / "upstream-ca.pem",
        )
        source.addresses["127.0.0.1"] = world.allowlist()
        source.tokens[("sb-1", TOKEN)] = source.addresses["127.0.0.1"]
        try:
            yield world
        finally:
            thread.stop()
