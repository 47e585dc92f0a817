"""Which preview a request addresses: by host name in host mode, by path otherwise."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings

from sandboxes import services

PATH_PREFIX = "/preview/"
# /preview/SANDBOX/PORT[/rest]: the sandbox id's own checks happen in the services.
_PATH = re.compile(
    r"^/preview/(?P<sandbox>[A-Za-z0-9_-]{1,64})/(?P<port>[0-9]{1,5})(?P<rest>/.*)?$"
)


@dataclass(frozen=True)
class PreviewTarget:
    sandbox_id: str
    port: int
    prefix: str  # what the browser's paths carry before the app's own ("" in host mode)
    path: str  # the path the app sees, from "/"
    host_mode: bool

    @property
    def cookie_path(self) -> str:
        return f"{self.prefix}/" if self.prefix else "/"


def _host(scope: dict) -> str:
    for name, value in scope.get("headers", []):
        if name == b"host":
            return value.decode("latin-1").lower()
    return ""


def is_preview_host(scope: dict) -> bool:
    """Whether the request's Host is under the preview domain (host mode only)."""
    domain = settings.SANDHUB_PREVIEW_DOMAIN
    if not domain:
        return False
    host = _host(scope)
    if "]" not in host:  # an IPv6 literal is no preview host; elsewhere drop the port
        host = host.rsplit(":", 1)[0]
    return host.endswith("." + domain)


def target_for(scope: dict) -> PreviewTarget | None:
    """The preview this request addresses, or None when it addresses none (a malformed
    preview address is None too: the caller answers 404)."""
    path = scope.get("path", "") or "/"
    if is_preview_host(scope):
        label = _host(scope).split(".", 1)[0]
        parsed = services.parse_preview_host(label + "." + settings.SANDHUB_PREVIEW_DOMAIN)
        if parsed is None:
            return None
        sandbox_id, port = parsed
        return PreviewTarget(sandbox_id, port, "", path, host_mode=True)
    match = _PATH.match(path)
    if match is None:
        return None
    port = int(match["port"])
    prefix = f"/preview/{match['sandbox']}/{port}"
    return PreviewTarget(match["sandbox"], port, prefix, match["rest"] or "", host_mode=False)


def wants_preview(scope: dict) -> bool:
    """Whether the ASGI app should hand this request to the proxy."""
    return is_preview_host(scope) or scope.get("path", "").startswith(PATH_PREFIX)
