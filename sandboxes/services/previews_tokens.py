"""Preview addresses, and the names of a preview token on its way in.

Tokens themselves are rows (sandboxes.models.AccessLink; rules in access_links.py): a random
secret that opens one preview, for the proxy to turn into a cookie. Every refusal is
NotFound, whatever the reason, so a token cannot be probed.

Addresses: with SANDHUB_PREVIEW_DOMAIN set, each preview is an origin of its own,
`PORT-SANDBOX.<domain>` (the sandbox id with '-' for '_': host names have no '_');
without it, a path on the platform's own origin, `/preview/SANDBOX/PORT/`.
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

from django.conf import settings

PREVIEW_TOKEN_PARAM = "sandhub_token"  # the query parameter of a first visit
PREVIEW_COOKIE = "sandhub_preview"  # the cookie the proxy turns it into
INVALID = "this preview is not available: not found, stopped, or the link has expired"
MAX_TOKEN_SECONDS = 7 * 24 * 3600  # the longest a preview token lives (get_preview_url)

# A host-mode label: "8000-sb-k3j9x0a2b4c6" (port, then the sandbox id with '-' for '_').
_LABEL = re.compile(r"^(?P<port>[0-9]{1,5})-sb-(?P<rest>[a-z0-9]{6,29})$")


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
