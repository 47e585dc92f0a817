"""Credential secrets at rest: Fernet with a key list (first encrypts, all decrypt)."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class CredentialKeyError(RuntimeError):
    pass


def _fernet() -> MultiFernet:
    keys = settings.CREDENTIAL_KEYS
    if not keys:
        raise CredentialKeyError("no credential encryption key is configured")
    try:
        return MultiFernet([Fernet(key.encode() if isinstance(key, str) else key) for key in keys])
    except ValueError as exc:
        raise CredentialKeyError(f"a credential key is not a valid Fernet key: {exc}") from exc


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise CredentialKeyError("the secret cannot be decrypted with any configured key") from exc


def rotate(token: str) -> str:
    """Re-encrypt under the first (newest) key."""
    try:
        return _fernet().rotate(token.encode()).decode()
    except InvalidToken as exc:
        raise CredentialKeyError("the secret cannot be decrypted with any configured key") from exc
