"""Loading a login private key from the text an admin pasted (OpenSSH or PEM format).

The key is parsed by `cryptography` (which tells "encrypted", "wrong passphrase" and
"not a key" apart), then handed to paramiko re-encoded as an unencrypted OpenSSH key in
memory: one path for every format (OpenSSH, PKCS#1, SEC1, PKCS#8) and key type paramiko signs
with. Errors name the problem, never the key or passphrase.
"""

from __future__ import annotations

import io

import paramiko
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from hosts.backends.ssh.errors import PrivateKeyError

SUPPORTED = "Ed25519, RSA or ECDSA"


def load_private_key(text: str, passphrase: str | None = None) -> paramiko.PKey:
    """A paramiko key from `text`; `passphrase` is used only if the key is encrypted."""
    data = _normalized(text)
    try:
        loaded = _parse(data, None)
    except TypeError:
        # cryptography raises TypeError for "encrypted but no password given".
        loaded = _decrypt(data, passphrase)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise PrivateKeyError(
            "the private key cannot be read: it is not a private key in OpenSSH or PEM format"
        ) from exc
    return _to_paramiko(loaded)


def _normalized(text: str) -> bytes:
    # Keys pasted into a browser form come back with CRLF line ends and stray blank space.
    lines = [line.strip() for line in text.strip().splitlines()]
    return ("\n".join(lines) + "\n").encode("ascii", errors="replace")


def _parse(data: bytes, password: bytes | None) -> PrivateKeyTypes:
    if b"BEGIN OPENSSH PRIVATE KEY" in data:
        return serialization.load_ssh_private_key(data, password)
    return serialization.load_pem_private_key(data, password)


def _decrypt(data: bytes, passphrase: str | None) -> PrivateKeyTypes:
    if not passphrase:
        raise PrivateKeyError(
            "the private key is protected by a passphrase, but no passphrase is configured"
        )
    try:
        return _parse(data, passphrase.encode())
    except (ValueError, TypeError) as exc:
        # OpenSSH-format keys report a wrong passphrase as a broken checksum, PEM ones as
        # "could not decrypt": both mean the same thing to an admin.
        raise PrivateKeyError("wrong passphrase for the private key") from exc


def _to_paramiko(loaded: PrivateKeyTypes) -> paramiko.PKey:
    cls: type[paramiko.PKey]
    if isinstance(loaded, ed25519.Ed25519PrivateKey):
        cls = paramiko.Ed25519Key
    elif isinstance(loaded, rsa.RSAPrivateKey):
        cls = paramiko.RSAKey
    elif isinstance(loaded, ec.EllipticCurvePrivateKey):
        cls = paramiko.ECDSAKey
    else:
        kind = type(loaded).__name__.removeprefix("_").replace("PrivateKey", "")
        raise PrivateKeyError(f"{kind} private keys are not supported: use {SUPPORTED}")
    plain = loaded.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    try:
        return cls.from_private_key(io.StringIO(plain.decode("ascii")))
    except paramiko.SSHException as exc:
        # E.g. an ECDSA curve paramiko does not sign with.
        raise PrivateKeyError(f"the private key cannot be used: {exc}") from exc
