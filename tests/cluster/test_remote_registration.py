"""A Docker engine on TCP with TLS added as an operator does (manage.py add_host ... --tls-*):
probed and saved with its credential; refused with a clear error and nothing saved when the
engine's certificate is not from the CA given, the client certificate is not from the
engine's CA, or no client certificate is given."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from hosts.models import Credential, Host
from tests.cluster.certs import Authority
from tests.cluster.dockerd2 import SecondEngine

pytestmark = pytest.mark.django_db


def add_host(name: str, url: str, **tls: Path | str) -> str:
    out = io.StringIO()
    call_command("add_host", name, url, stdout=out, **{k: str(v) for k, v in tls.items()})
    return out.getvalue()


def nothing_saved() -> bool:
    return not Host.objects.exists() and not Credential.objects.exists()


def test_the_engine_is_added_with_tls_and_probed(second_engine: SecondEngine) -> None:
    files = second_engine.tls_files
    out = add_host("engine-2", second_engine.url, tls_ca=files.ca, tls_cert=files.cert,
                   tls_key=files.key)  # fmt: skip
    assert "added docker host engine-2" in out and "Docker 20.10" in out
    host = Host.objects.get(name="engine-2")
    assert host.healthy and host.endpoint == second_engine.url
    assert host.credential is not None and host.credential.kind == "docker_tls"
    assert 0.0 <= host.idle_score <= 1.0


def test_an_engine_certificate_from_another_ca_is_refused(
    second_engine: SecondEngine, tmp_path: Path
) -> None:
    stranger = Authority.create(tmp_path, "stranger")
    files = second_engine.tls_files
    with pytest.raises(
        CommandError, match="engine's certificate is not signed by the CA given.*nothing was saved"
    ):
        add_host("engine-2", second_engine.url, tls_ca=stranger.path, tls_cert=files.cert,
                 tls_key=files.key)  # fmt: skip
    assert nothing_saved()


def test_a_client_certificate_from_another_ca_is_refused(
    second_engine: SecondEngine, tmp_path: Path
) -> None:
    stranger = Authority.create(tmp_path, "stranger").issue(tmp_path, "intruder", server=False)
    with pytest.raises(
        CommandError, match="engine refused the client certificate.*nothing was saved"
    ):
        add_host("engine-2", second_engine.url, tls_ca=second_engine.tls_files.ca,
                 tls_cert=stranger.cert, tls_key=stranger.key)  # fmt: skip
    assert nothing_saved()


def test_without_a_client_certificate_nothing_is_saved(second_engine: SecondEngine) -> None:
    with pytest.raises(CommandError, match="all of --tls-ca, --tls-cert, --tls-key"):
        add_host("engine-2", second_engine.url, tls_ca=second_engine.tls_files.ca)
    with pytest.raises(CommandError, match="only with TLS material"):
        add_host("engine-2", second_engine.url)
    assert nothing_saved()
