"""Fixtures of the service tests. Egress (test_egress_*.py): teams that may have network,
one with an allow-list, and the deployment's CA made here (a throwaway one, so these tests
need nothing of the proxy's package but its rule parser)."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hosts import crypto
from sandboxes.models import EgressAuthority
from tenants.models import Channel
from tenants.principal import Principal

TEAM_LIST = ["pypi.org", "*.pythonhosted.org:443", "github.com:22,443"]


def throwaway_ca() -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test egress CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem


@pytest.fixture
def deployment_ca(db) -> str:
    cert_pem, key_pem = throwaway_ca()
    EgressAuthority.objects.create(cert_pem=cert_pem, key_encrypted=crypto.encrypt(key_pem))
    return cert_pem


@pytest.fixture
def networked_teams(team_a, team_b, deployment_ca):
    """Both teams may have network; team A has an allow-list, team B none."""
    team_a.allow_network = True
    team_a.egress_allowlist = list(TEAM_LIST)
    team_a.save()
    team_b.allow_network = True
    team_b.save()
    return team_a, team_b


@pytest.fixture
def as_mallory(mallory, team_a) -> Principal:
    return Principal(user=mallory, team=team_a, channel=Channel.WEB)


@pytest.fixture
def as_read_only_key(alice, team_a) -> Principal:
    return Principal(user=alice, team=team_a, channel=Channel.API, scopes=frozenset({"read"}))
