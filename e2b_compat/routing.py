"""A sandbox's own envd host name, as E2B's SDKs address a sandbox without E2B_SANDBOX_URL:
`49983-<sandbox id>.<preview domain>` (envd's port, on Sandhub's wildcard preview domain). Such
a request goes to /e2b/envd/ with the sandbox taken from the host name (any E2b-Sandbox-Id the
client sent is replaced); every other port on the domain stays a preview."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

__all__ = ["ENVD_PORT", "envd_sandbox", "envd_scope"]

ENVD_PORT = 49983
ENVD_PATH = "/e2b/envd"
_SANDBOX_HEADER = b"e2b-sandbox-id"


def envd_scope(scope: dict[str, Any]) -> dict[str, Any] | None:
    """The scope to serve at /e2b/envd/ if the request is for a sandbox's envd host, else None."""
    if scope.get("type") != "http" or not settings.SANDHUB_PREVIEW_DOMAIN:
        return None  # without a preview domain there are no sandbox host names
    host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "")
    sandbox_id = envd_sandbox(host, settings.SANDHUB_PREVIEW_DOMAIN)
    if sandbox_id is None:
        return None
    path = ENVD_PATH + (scope.get("path") or "/")
    headers = [(k, v) for k, v in scope.get("headers", []) if k not in (_SANDBOX_HEADER, b"host")]
    headers.append((_SANDBOX_HEADER, sandbox_id.encode()))
    # Django checks the Host against ALLOWED_HOSTS, which names the site, not each sandbox's
    # host: the request was routed by its host already, so Django sees the site's name.
    headers.append((b"host", _site_host().encode()))
    return {**scope, "path": path, "raw_path": path.encode(), "headers": headers}


# E2B's SDKs write the sandbox id as it is (`sb_...`); Sandhub's own host names use `sb-`.
_LABEL = re.compile(rf"^{ENVD_PORT}-sb[-_](?P<rest>[a-z0-9]{{6,29}})$")


def envd_sandbox(host: str, domain: str) -> str | None:
    """The sandbox whose envd host `host` is (under `domain`), or None."""
    host = host.strip().lower()
    if host.startswith("["):
        return None
    host = host.rsplit(":", 1)[0]
    if not domain or not host.endswith("." + domain):
        return None
    match = _LABEL.match(host[: -len(domain) - 1])
    return f"sb_{match['rest']}" if match else None


def _site_host() -> str:
    for name in settings.ALLOWED_HOSTS:
        if name and name != "*":
            return name.lstrip(".")
    return "localhost"
