"""Where an app's redirect may send the browser: anywhere within its own preview; elsewhere
only through a page that names the destination and lets the visitor decide.

An app's `Location: //evil.example/` would otherwise be an open redirect on the platform's
(path mode) or the preview domain's name. The Location is read as a browser reads it (tabs
and newlines dropped, `\\` as `/`, `%2e` as a dot in a path), resolved against the address
the browser asked for, and kept only when it stays in the preview: the same host (host
mode), or a path under /preview/SANDBOX/PORT/ (path mode, where the app's own absolute paths
and `http://localhost:PORT/...` are moved under the prefix first).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from urllib.parse import SplitResult, urljoin, urlsplit, urlunsplit

from sandboxes.proxy.credentials import header
from sandboxes.proxy.routing import PreviewTarget

WEB_SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443}
APP_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
_IGNORED_BY_BROWSERS = re.compile(r"[\t\n\r]")
_ENCODED_DOT = re.compile(r"%2e", re.IGNORECASE)
_C0_AND_SPACE = "".join(chr(code) for code in range(0x21))  # what URL parsing trims
PAGE_CSP = (
    b"default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    b"frame-ancestors 'none'; sandbox allow-popups allow-popups-to-escape-sandbox"
)


@dataclass(frozen=True)
class OffSite:
    destination: str  # absolute, where the browser would have gone
    linkable: bool  # an http(s) address: offered as a link; anything else only named


def judge(location: bytes, scope: dict, target: PreviewTarget) -> bytes | OffSite:
    """The Location the browser gets (the app's, or rewritten into the preview), or OffSite."""
    text = location.decode("latin-1")
    clean = _IGNORED_BY_BROWSERS.sub("", text).strip(_C0_AND_SPACE).replace("\\", "/")
    parts = urlsplit(clean)
    scheme = parts.scheme.lower()
    if scheme and scheme not in WEB_SCHEMES:
        return OffSite(clean, linkable=False)
    if parts.netloc and _is_the_app_itself(parts, target):
        clean = _path_and_after(parts)  # the app's own name for itself: a path of its own
    elif parts.netloc or scheme:
        absolute = urlunsplit(parts._replace(scheme=scheme or _own_scheme(scope)))
        if _same_host(parts, scope) and (target.host_mode or _inside(absolute, target)):
            return location
        return OffSite(absolute, linkable=True)
    if target.host_mode:
        return clean.encode("latin-1")
    browser_sees = target.prefix + clean if clean.startswith("/") else clean
    resolved = urljoin(_requested(scope), _dots_decoded(browser_sees))
    if _inside(resolved, target):
        return browser_sees.encode("latin-1")
    return OffSite(resolved, linkable=True)


def page(off_site: OffSite) -> bytes:
    """The page said instead of an off-site redirect."""
    named = html.escape(off_site.destination, quote=True)
    where = (
        f'<a href="{named}" rel="noopener noreferrer">{named}</a>'
        if off_site.linkable
        else f"<code>{named}</code>"
    )
    return (
        "<!doctype html>\n<html lang=en><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width'>\n"
        "<title>Leaving the preview</title>\n"
        "<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;"
        "padding:0 1rem}a,code{word-break:break-all}</style>\n"
        "<h1>Leaving the preview</h1>\n"
        "<p>The app of this preview sends you to an address outside it:</p>\n"
        f"<p>{where}</p>\n"
        "<p>That address is not part of this preview or of Sandhub. "
        "Go on only if you trust it.</p>\n"
    ).encode()


def _is_the_app_itself(parts: SplitResult, target: PreviewTarget) -> bool:
    try:
        port = parts.port
    except ValueError:
        return False
    return (parts.hostname or "") in APP_HOSTS and port == target.port


def _path_and_after(parts: SplitResult) -> str:
    rest = parts.path or "/"
    rest += f"?{parts.query}" if parts.query else ""
    return rest + (f"#{parts.fragment}" if parts.fragment else "")


def _own_scheme(scope: dict) -> str:
    return "https" if scope.get("scheme") in ("https", "wss") else "http"


def _host_key(netloc: str, scheme: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        return (parts.hostname or "", parts.port or DEFAULT_PORTS.get(scheme, 0))
    except ValueError:
        return None


def _same_host(parts: SplitResult, scope: dict) -> bool:
    own = header(scope, b"host") or ""
    scheme = parts.scheme.lower() or _own_scheme(scope)
    theirs = _host_key(parts.netloc.lower(), scheme)
    return theirs is not None and theirs == _host_key(own.lower(), _own_scheme(scope))


def _requested(scope: dict) -> str:
    """The absolute address the browser asked for (what a relative Location resolves on)."""
    path = (scope.get("raw_path") or scope.get("path", "/").encode()).decode("latin-1")
    return f"{_own_scheme(scope)}://{header(scope, b'host') or 'localhost'}{path}"


def _dots_decoded(reference: str) -> str:
    """`%2e` as the dot it is to a browser resolving a path (the query keeps it)."""
    path, mark, rest = reference.partition("?")
    return _ENCODED_DOT.sub(".", path) + mark + rest


def _inside(absolute: str, target: PreviewTarget) -> bool:
    """Whether the address's path, dot segments resolved as a browser does, is the preview's."""
    path = urlsplit(urljoin("http://x/", _dots_decoded(urlsplit(absolute).path))).path
    return path == target.prefix or path.startswith(target.prefix + "/")
