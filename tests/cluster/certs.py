"""A test CA and the certificates of a Docker engine on TCP with TLS: the server's (for
127.0.0.1 and localhost) and a client's. Not a test module."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)  # a test run's certificates, no longer


@dataclass(frozen=True)
class TlsFiles:
    """PEM file paths: the CA that signed the other side, this side's certificate and key."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    path: Path

    @classmethod
    def create(cls, directory: Path, name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(name)
        builder = _builder(subject, subject, key.public_key()).add_extension(
            x509.BasicConstraints(ca=True, path_length=0), critical=True
        )
        cert = builder.sign(key, hashes.SHA256())
        path = directory / f"{name}-ca.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(cert, key, path)

    def issue(self, directory: Path, name: str, *, server: bool) -> TlsFiles:
        """A certificate signed by this CA: for the engine (server) or a client of it."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            _builder(_name(name), self.cert.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = directory / f"{name}-cert.pem", directory / f"{name}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.touch(mode=0o600)
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return TlsFiles(ca=self.path, cert=cert_path, key=key_path)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )
