"""Preview tokens and addresses: what a preview URL looks like, and the signed token in it.

A token is the signed (django.core.signing.TimestampSigner, a salt of its own) description
of what it opens: the sandbox's public id, the port, the preview's id, its expiry and who
made it. No table: it dies when it expires, when its preview stops (a preview opened again
on the same port has a new id), when its sandbox goes, or when its maker leaves the team.
Every refusal is NotFound, whatever the reason, so a token cannot be probed.

Addresses: with SANDHUB_PREVIEW_DOMAIN set, each preview is an origin of its own,
`PORT-SANDBOX.<domain>` (the sandbox id with '-' for '_': host names have no '_');
without it, a path on the platform's own origin, `/preview/SANDBOX/PORT/`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from django.conf import settings
from django.core import signing

from sandboxes.contract.errors import NotFound

PREVIEW_TOKEN_PARAM = "sandhub_token"  # the query parameter of a first visit
PREVIEW_COOKIE = "sandhub_preview"  # the cookie the proxy turns it into
SALT = "sandhub.preview-token"
INVALID = "this preview is not available: not found, stopped, or the link has expired"
# A backstop on top of each token's own expiry (get_preview_url's maximum).
MAX_TOKEN_SECONDS = 7 * 24 * 3600
MAX_TOKEN_CHARS = 1000

# A host-mode label: "8000-sb-k3j9x0a2b4c6" (port, then the sandbox id with '-' for '_').
_LABEL = re.compile(r"^(?P<port>[0-9]{1,5})-sb-(?P<rest>[a-z0-9]{6,29})$")


@dataclass(frozen=True)
class TokenClaims:
    sandbox_id: str
    port: int
    preview_id: int
    expires_at: datetime
    creator_id: int | None


def _signer() -> signing.TimestampSigner:
    return signing.TimestampSigner(salt=SALT)


def mint_token(
    sandbox_id: str, port: int, preview_id: int, expires_at: datetime, creator_id: int | None
) -> str:
    payload = {
        "s": sandbox_id,
        "p": port,
        "i": preview_id,
        "e": int(expires_at.timestamp()),
        "u": creator_id,
    }
    return _signer().sign_object(payload, compress=True)


def read_token(token: Any) -> TokenClaims:
    """The claims of a genuine, unexpired token; NotFound for anything else."""
    if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
        raise NotFound(INVALID)
    try:
        payload = _signer().unsign_object(token, max_age=MAX_TOKEN_SECONDS)
    except (signing.BadSignature, ValueError):  # tampered, too old, or no token at all
        raise NotFound(INVALID) from None
    if not isinstance(payload, dict) or not all(k in payload for k in "spieu"):
        raise NotFound(INVALID)
    expires = payload["e"]
    if not isinstance(expires, int) or expires <= time.time():
        raise NotFound(INVALID)
    return TokenClaims(
        sandbox_id=str(payload["s"]),
        port=int(payload["p"]),
        preview_id=int(payload["i"]),
        expires_at=datetime.fromtimestamp(expires, tz=UTC),
        creator_id=payload["u"],
    )


def preview_domain() -> str:
    return str(getattr(settings, "SANDHUB_PREVIEW_DOMAIN", "") or "").strip(".").lower()


def preview_url(base_url: str, sandbox_id: str, port: int, token: str | None) -> str:
    """Where a browser opens the preview. `base_url` is the platform's own address as the
    caller reached it (scheme, host, port, and a trailing path when mounted under one; "/"
    when unknown); the token, when given, rides along as ?sandhub_token=."""
    domain = preview_domain()
    if domain:
        base = urlsplit(base_url)
        host = f"{preview_host_label(sandbox_id, port)}.{domain}"
        netloc = f"{host}:{base.port}" if base.port else host
        url = urlunsplit((base.scheme or "http", netloc, "/", "", ""))
    else:
        prefix = base_url if base_url.endswith("/") else base_url + "/"
        url = f"{prefix}preview/{sandbox_id}/{port}/"
    if token:
        url += f"?{PREVIEW_TOKEN_PARAM}={quote(token, safe='')}"
    return url


def preview_host_label(sandbox_id: str, port: int) -> str:
    return f"{port}-{sandbox_id.replace('_', '-')}"


def parse_preview_host(host: str) -> tuple[str, int] | None:
    """(sandbox id, port) of a host-mode address like `8000-sb-k3j9x0a2b4c6.<domain>[:port]`;
    None for any other host (not under the preview domain, or not such a label)."""
    host = host.strip().lower()
    if host.startswith("["):  # an IPv6 literal is never a preview
        return None
    host = host.rsplit(":", 1)[0] if ":" in host else host
    domain = preview_domain()
    if domain:
        if not host.endswith("." + domain):
            return None
        label = host[: -len(domain) - 1]
    else:
        label = host.split(".", 1)[0]
    match = _LABEL.match(label)
    if match is None:
        return None
    port = int(match["port"])
    if not 1 <= port <= 65535:
        return None
    return f"sb_{match['rest']}", port
