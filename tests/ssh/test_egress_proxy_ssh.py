"""End to end: an isolated SSH sandbox behind the real egress proxy (egress.thread.ProxyThread
on 127.0.0.1, its policy from a dict source by the sandbox's token), on a real sshd. Clients
in the sandbox take the proxy from HTTP_PROXY / HTTPS_PROXY and trust the deployment's CA
through the bundle bound into the sandbox; the upstream servers are on loopback, named by the
proxy's resolver overrides (nothing leaves this machine)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from egress.ca import CertificateAuthority, generate_ca
from egress.policy import BoundSecret, SandboxPolicy, parse_rule
from egress.resolver import Resolver
from egress.server import EgressProxy
from egress.thread import ProxyThread
from hosts.backends.ssh.backend import SshBackend
from tests.egress.servers import DictSource, Upstream, serving
from tests.ssh.egress_stage import backend_for, egress_spec, inside, probe
from tests.ssh.sshd import Sshd

pytestmark = pytest.mark.sshd

SECRET = BoundSecret(
    name="API_KEY",
    hosts=("secret.test",),
    header="Authorization",
    value="Bearer real-secret-of-the-ssh-test",
    placeholder="sandhub-secret-ssh0123456789",
)


@dataclass
class Proxied:
    proxy: ProxyThread
    source: DictSource
    ca_pem: str
    plain: Upstream  # http://allowed.test:<port>
    secret: Upstream  # https://secret.test:<port>, its own CA (the proxy's upstream_cafile)


def upstream_context(ca: CertificateAuthority, host: str) -> ssl.SSLContext:
    context = ca.server_context(host)
    context.set_alpn_protocols(["http/1.1"])
    return context


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    ca_pem, ca_key = generate_ca("Sandhub SSH test deployment CA")
    upstream_pem, upstream_key = generate_ca("SSH test upstream CA")
    upstream_file = tmp_path_factory.mktemp("egress") / "upstream-ca.pem"
    upstream_file.write_text(upstream_pem)
    source = DictSource()
    proxy = EgressProxy(
        source,
        resolver=Resolver({"allowed.test": "127.0.0.1", "secret.test": "127.0.0.1"}),
        ca=CertificateAuthority(ca_pem, ca_key),
        upstream_cafile=str(upstream_file),
    )
    upstream_ca = CertificateAuthority(upstream_pem, upstream_key)
    with (
        serving("allowed.test") as plain,
        serving("secret.test", upstream_context(upstream_ca, "secret.test")) as secret,
    ):
        thread = ProxyThread(proxy, host="127.0.0.1", dns_host="127.0.0.1").start()
        try:
            yield Proxied(thread, source, ca_pem, plain, secret)
        finally:
            thread.stop()


@pytest.fixture(scope="module")
def backend(sshd: Sshd, base_dir: str, sudo_for_test_user: None) -> Iterator[SshBackend]:
    ssh = backend_for(sshd, sshd.username, base_dir)
    yield ssh
    ssh.close()


@pytest.fixture(scope="module")
def box(backend: SshBackend, proxied: Proxied) -> Iterator[dict[str, Any]]:
    spec = egress_spec(proxied.proxy.port, proxied.ca_pem, env={"API_KEY": SECRET.placeholder})
    assert spec.egress is not None
    state = backend.provision(spec)
    policy = SandboxPolicy(
        sandbox_id=spec.sandbox_id,
        mode="allowlist",
        rules=(
            parse_rule(f"allowed.test:{proxied.plain.port}"),
            parse_rule(f"secret.test:{proxied.secret.port}"),
        ),
        secrets=(SECRET,),
    )
    proxied.source.tokens[(spec.sandbox_id, spec.egress.token)] = policy
    yield state
    backend.destroy(state)


def test_an_allowed_name_is_reached_and_another_refused(
    backend: SshBackend, box: dict[str, Any], proxied: Proxied
) -> None:
    allowed = f"http://allowed.test:{proxied.plain.port}/from-ssh"
    assert probe(backend, box, "get", allowed)["answer"] == "200 hello from allowed.test"
    assert proxied.plain.requests[-1][0] == "/from-ssh"
    refused = probe(backend, box, "get", f"http://elsewhere.test:{proxied.plain.port}/")
    assert refused["answer"].startswith("failed HTTP Error 403"), refused
    proxied.proxy.report_now()
    assert (box["sandbox_id"], f"elsewhere.test:{proxied.plain.port}", "not_allowed") in (
        proxied.source.total()
    )


def test_a_bound_secret_arrives_over_https_trusted_through_the_bundle(
    backend: SshBackend, box: dict[str, Any], proxied: Proxied
) -> None:
    url = f"https://secret.test:{proxied.secret.port}/v1/models"
    # The proxy's leaf certificate verified through SSL_CERT_FILE (the sandbox's variables),
    # then through the system bundle alone (the path bound over the host's).
    for unset in ("", "SSL_CERT_FILE"):
        answer = probe(backend, box, "get", url, "Authorization", "API_KEY", unset=unset)
        assert answer["answer"] == "200 hello from secret.test", (unset, answer)
        assert proxied.secret.requests[-1][1]["Authorization"] == SECRET.value
    seen = inside(backend, box, "for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null || :; done")
    assert SECRET.placeholder in seen and SECRET.value not in seen
