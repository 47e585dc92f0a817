"""The deployment CA: the certificate sandboxes trust, and the leaf certificates the proxy
shows for the hosts whose TLS it intercepts (only hosts a secret is bound to)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
import threading

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from egress.policy import is_ip_literal, normalize_host


def generate_ca(common_name: str) -> tuple[str, str]:
    """A new CA certificate and its private key, both PEM (valid ten years)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode()


class CertificateAuthority:
    """Signs leaf certificates with the CA; one leaf key for every host (making a key per
    host costs time and buys nothing: the leaf key never leaves the proxy)."""

    def __init__(self, cert_pem: str, key_pem: str) -> None:
        self.cert_pem = cert_pem
        self._certificate = x509.load_pem_x509_certificate(cert_pem.encode())
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError("the CA key must be an EC or RSA private key")
        self._key = key
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def server_context(self, hostname: str) -> ssl.SSLContext:
        """A server-side context showing a leaf for `hostname` (cached per host)."""
        hostname = normalize_host(hostname)
        with self._lock:
            context = self._contexts.get(hostname)
            if context is None:
                context = self._new_context(hostname)
                self._contexts[hostname] = context
            return context

    def _new_context(self, hostname: str) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # ssl loads certificates only from files: one private to this user (0600), for the
        # moment it takes.
        with tempfile.NamedTemporaryFile(prefix="sandhub-egress-leaf-", suffix=".pem") as file:
            file.write(self._leaf_pem(hostname))
            file.flush()
            context.load_cert_chain(file.name)
        context.set_alpn_protocols(["http/1.1"])
        return context

    def _leaf_pem(self, hostname: str) -> bytes:
        alternative: x509.GeneralName = (
            x509.IPAddress(ipaddress.ip_address(hostname))
            if is_ip_literal(hostname)
            else x509.DNSName(hostname)
        )
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname[:64])]))
            .issuer_name(self._certificate.subject)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=3))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        key_pem = self._leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return certificate.public_bytes(serialization.Encoding.PEM) + key_pem
