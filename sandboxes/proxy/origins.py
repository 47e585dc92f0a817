"""A preview trusts only itself: which requests may reach it with the visitor's cookies.

With a preview domain all previews are one *site*, so a `SameSite=Lax` cookie rides along
on a request that a sibling preview's page makes (a fetch, an image, a websocket): one
tenant's page could act in another tenant's app as its visitor. The rule (Fetch Metadata's
resource isolation policy, https://web.dev/articles/fetch-metadata) refuses, before any
authorization, every request that carries cookies and every websocket upgrade unless it
comes from the preview's own origin, or is a top-level navigation (a link followed, an
address typed: GET or HEAD, never a websocket).

- `Sec-Fetch-Site` (sent by current browsers to https and localhost addresses):
  `same-origin` and `none` pass; `same-site` and `cross-site` pass only as a navigation.
- Without it, an `Origin` header must be the preview's own origin (`null`, an opaque
  origin, is not).
- Without either, the request passes: it is no browser's, so it carries no victim's cookie.

The own origin is the request's scheme and Host, as the web process sees them (behind a
TLS-terminating proxy, run uvicorn with --proxy-headers so the scheme is the browser's). In
path mode that is the platform's origin: an app's page there is served in a CSP sandbox (an
opaque origin), so what its scripts send with cookies is refused.
"""

from __future__ import annotations

from sandboxes.http.origins import origin_key
from sandboxes.proxy.credentials import header

SAME = frozenset({"same-origin", "none"})
SIBLING = frozenset({"same-site", "cross-site"})
NAVIGATION_METHODS = frozenset({"GET", "HEAD"})


def refusal(scope: dict) -> str | None:
    """Why this request may not reach its preview (a short text for the 403), or None."""
    websocket = scope["type"] == "websocket"
    if not websocket and header(scope, b"cookie") is None:
        return None  # no cookie: nothing of a victim's to misuse
    site = header(scope, b"sec-fetch-site")
    if site is not None:
        site = site.strip().lower()
        if site in SAME or (site in SIBLING and not websocket and _navigation(scope)):
            return None
        return f"refused: a request from another origin (Sec-Fetch-Site: {site[:20]})"
    origin = header(scope, b"origin")
    if origin is None:
        return None
    own = own_origin(scope)
    if own is not None and origin_key(origin) == own:
        return None
    return "refused: a request from another origin"


def _navigation(scope: dict) -> bool:
    """A top-level navigation: what a link or the address bar asks for, never a script."""
    mode = (header(scope, b"sec-fetch-mode") or "").lower()
    dest = (header(scope, b"sec-fetch-dest") or "").lower()
    return mode == "navigate" and dest == "document" and scope["method"] in NAVIGATION_METHODS


def own_origin(scope: dict) -> tuple[str, str, int] | None:
    """(scheme, host, port) of the origin this request was addressed to."""
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    host = header(scope, b"host")
    if not host:
        return None
    return origin_key(f"{scheme}://{host}")
