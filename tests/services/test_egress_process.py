"""The proxy's process as `manage.py egressproxy` builds it (services.egress_proxy): the
egress package's proxy over the database, the deployment CA from the database, the operator's
name map from the settings. Run here in a thread (egress.thread.ProxyThread) against servers
on loopback; the database is shared with the proxy's worker threads (transactional_db)."""

from __future__ import annotations

import os
import signal
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from egress.ca import CertificateAuthority, generate_ca
from egress.thread import ProxyThread
from sandboxes import services
from sandboxes.models import EgressRefusal, Sandbox
from sandboxes.services import egress_ca
from tests.egress.servers import basic, https_get, proxied_get, serving, tunnel
from tests.live import free_port

pytestmark = pytest.mark.django_db(transaction=True)
VALUE = "real-value-of-the-team-key"


@pytest.fixture
def upstream_ca(tmp_path: Path, settings) -> CertificateAuthority:
    cert, key = generate_ca("Upstream test CA")
    (tmp_path / "upstream.pem").write_text(cert)
    settings.SANDHUB_EGRESS_UPSTREAM_CA = str(tmp_path / "upstream.pem")
    return CertificateAuthority(cert, key)


@pytest.fixture
def proxy(settings, upstream_ca) -> Iterator[ProxyThread]:
    settings.SANDHUB_EGRESS_HOSTS = {"allowed.test": "127.0.0.1", "secret.test": "127.0.0.1"}
    thread = ProxyThread(services.egress_proxy(), host="127.0.0.1", dns_host="127.0.0.1")
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


def test_a_sandbox_reaches_its_allow_list_with_its_secret(
    fake_backend, as_alice, team_a, proxy, upstream_ca
):
    context = upstream_ca.server_context("secret.test")
    with serving("allowed.test") as plain, serving("secret.test", context) as secret:
        team_a.allow_network = True
        team_a.egress_allowlist = [f"allowed.test:{plain.port}", f"secret.test:{secret.port}"]
        team_a.save()
        services.add_secret(as_alice, name="KEY", hosts=["secret.test"], value=VALUE)
        info = services.create_sandbox(as_alice, network="allowlist")
        sandbox = Sandbox.objects.get(public_id=info.id)
        auth = {"Proxy-Authorization": basic(info.id, sandbox.egress_token)}

        status, _, body = proxied_get(proxy.port, f"http://allowed.test:{plain.port}/x", auth)
        assert (status, body) == (200, b"hello from allowed.test")
        status, _, _ = proxied_get(proxy.port, "http://elsewhere.test/", auth)
        assert status == 403
        wrong = {"Proxy-Authorization": basic(info.id, "not-the-token")}
        assert proxied_get(proxy.port, f"http://allowed.test:{plain.port}/", wrong)[0] == 407

        # The sandbox trusts the deployment CA; the proxy puts the value for the placeholder.
        trusted = ssl.create_default_context(cadata=egress_ca.ca_certificate())
        placeholder = services.list_secrets(as_alice)[0].placeholder
        with tunnel(proxy.port, "secret.test", secret.port, trusted, auth) as sock:
            sent = {"Authorization": f"Bearer {placeholder}", "Connection": "close"}
            answer = https_get(sock, "secret.test", "/v1", sent)
        assert answer.endswith(b"hello from secret.test") and VALUE.encode() not in answer
        assert secret.requests[-1][1]["Authorization"] == f"Bearer {VALUE}"

    proxy.report_now()
    [refusal] = EgressRefusal.objects.filter(sandbox=sandbox)
    assert (refusal.destination, refusal.count) == ("elsewhere.test:80", 1)
    assert services.network_log(as_alice, info.id).refused[0].destination == "elsewhere.test:80"


def test_the_command_serves_until_sigterm(settings):
    settings.SANDHUB_EGRESS_BIND = "127.0.0.1"
    settings.SANDHUB_EGRESS_PORT, settings.SANDHUB_EGRESS_DNS_PORT = free_port(), free_port()
    answers: list[int] = []

    def client() -> None:
        try:
            deadline = time.monotonic() + 30
            while True:  # until the command listens (it makes the CA first)
                try:
                    answers.append(proxied_get(settings.SANDHUB_EGRESS_PORT, "http://a.test/")[0])
                    break
                except ConnectionRefusedError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=client)
    thread.start()
    call_command("egressproxy")  # returns on SIGTERM
    thread.join()
    assert answers == [407]  # no credential, no known address: refused
