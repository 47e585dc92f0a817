"""The app's response headers as the browser gets them.

An app is a tenant's code answering on an address the platform vouches for: what it says
about the connection is dropped, what would reach past its own preview is dropped or made
its own (cookies: cookies.py; redirects: redirects.py), and in path mode its pages are
served in a CSP sandbox.
"""

from __future__ import annotations

from sandboxes.proxy import cookies, redirects
from sandboxes.proxy.redirects import OffSite
from sandboxes.proxy.routing import PreviewTarget

# Headers that describe one connection, not the message (RFC 9110 §7.6.1).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# uvicorn writes its own.
SET_BY_SERVER = frozenset({b"date", b"server"})
# What acts on more than the app's own responses: Clear-Site-Data wipes the origin's cookies
# and storage (in path mode the platform's session: a logout by any app), Alt-Svc sends the
# browser's later connections to the origin elsewhere, Service-Worker-Allowed lets a worker
# take a scope wider than the app's path.
REACHES_PAST_THE_APP = frozenset({b"clear-site-data", b"alt-svc", b"service-worker-allowed"})
# A path-mode preview shares the platform's origin: its pages run as an opaque origin, so
# their scripts can neither read the platform's cookies nor call its API as the viewer.
PATH_MODE_CSP = (
    b"sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads "
    b"allow-popups-to-escape-sandbox"
)


def for_browser(
    status: int, headers: list[tuple[bytes, bytes]], scope: dict, target: PreviewTarget
) -> tuple[list[tuple[bytes, bytes]], OffSite | None]:
    """(the headers to send on, an off-site redirect to say as a page instead, if any)."""
    kept: list[tuple[bytes, bytes]] = []
    off_site: OffSite | None = None
    for name, value in headers:
        name = name.lower()
        if name in HOP_BY_HOP or name in SET_BY_SERVER or name in REACHES_PAST_THE_APP:
            continue
        if name == b"set-cookie":
            rewritten = cookies.from_app(value.decode("latin-1"), target)
            if rewritten is None:
                continue
            value = rewritten.encode("latin-1")
        if name == b"location":
            judged = redirects.judge(value, scope, target)
            if isinstance(judged, OffSite):
                # Followed only on a redirect; elsewhere a Location leaving the preview is
                # dropped all the same (nothing of the app's should point a script there).
                off_site = judged if 300 <= status < 400 else off_site
                continue
            value = judged
        kept.append((name, value))
    if not target.host_mode:
        kept.append((b"content-security-policy", PATH_MODE_CSP))
    return kept, off_site
