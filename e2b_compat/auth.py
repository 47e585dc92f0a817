"""Who calls the E2B endpoints.

- The control API (create, list, kill, ...): a Sandhub API key in `X-API-Key`, where E2B's
  SDKs send `E2B_API_KEY`; checked as every channel checks keys (rate limits, lockouts, an
  audit row for a refusal).
- envd (commands, files): the `X-Access-Token` E2B's SDKs send with every call to a sandbox,
  which create and connect hand out as `envdAccessToken`. Sandhub's is signed (Django's
  signing, SECRET_KEY) and names the sandbox and the API key it was made for; each use checks
  the signature, the sandbox, and that the key may still be used, so revoking the key (or
  removing its user from the team) ends its tokens at once. No table, nothing to clean up.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core import signing

from tenants import apikeys
from tenants.models import ApiKey, Channel
from tenants.principal import Principal
from tenants.ratelimits import RateLimited

__all__ = ["Unauthenticated", "api_caller", "envd_caller", "envd_token"]

ENVD_SALT = "sandhub.e2b.envd-access-token"


class Unauthenticated(Exception):
    """401 (or 429 with retry_after while the key or address is locked out)."""

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


@dataclass(frozen=True)
class Caller:
    key: ApiKey
    principal: Principal


def api_caller(raw_key: str | None, address: str | None) -> Caller:
    """The control API's caller, from its X-API-Key header."""
    if not raw_key:
        raise Unauthenticated("send a Sandhub API key as X-API-Key (E2B_API_KEY)")
    try:
        key = apikeys.authenticate(raw_key, address=address, channel=Channel.E2B)
    except RateLimited as exc:
        raise Unauthenticated(exc.message, exc.retry_after) from exc
    if key is None:
        raise Unauthenticated("invalid API key")
    apikeys.touch(key, address)
    return Caller(key, apikeys.principal_for(key, Channel.E2B, address))


def envd_token(key: ApiKey, sandbox_id: str) -> str:
    """The envdAccessToken of `sandbox_id` for calls made with `key`."""
    return signing.dumps({"k": key.pk, "s": sandbox_id}, salt=ENVD_SALT)


def envd_caller(token: str | None, sandbox_id: str, address: str | None) -> Caller:
    """envd's caller, from its X-Access-Token, for `sandbox_id` only. The same refusal for a
    forged token, another sandbox's token and a dead key: nothing tells them apart."""
    refused = Unauthenticated("invalid or expired access token for this sandbox")
    if not token:
        raise refused
    try:
        claims = signing.loads(token, salt=ENVD_SALT)
    except signing.BadSignature as exc:
        raise refused from exc
    if not isinstance(claims, dict) or claims.get("s") != sandbox_id:
        raise refused
    key_id = claims.get("k")
    key = apikeys.live_key(key_id) if isinstance(key_id, int) else None
    if key is None:
        raise refused
    return Caller(key, apikeys.principal_for(key, Channel.E2B, address))
