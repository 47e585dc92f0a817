"""Cookies between the browser and an app in a sandbox: which of the browser's the app sees,
and what the app's Set-Cookie may set.

Path mode: every preview shares the platform's origin, hence one cookie jar. An app's cookie
is made its own preview's on the way out: its name gets the preview's scope (a short prefix
derived from the sandbox and the port) and its Path the preview's prefix (`Path=/` becomes
`Path=/preview/SB/PORT/`); Domain goes. On the way in the app gets only the cookies of its
own scope, without the scope. So the platform's cookies (session, CSRF, the preview token),
another preview's and anything else in the jar never reach the app, whatever paths the
browser matches, and nothing the app sets reaches the platform's pages or another preview.

Host mode: each preview is its own host. The app's Domain attribute is dropped, so its
cookies stay on its host (a `Domain=<parent>` would reach every preview, and the platform
when it shares the parent); the platform's cookie names are kept from it both ways.
"""

from __future__ import annotations

import hashlib
import string

from django.conf import settings

from sandboxes import services
from sandboxes.proxy.credentials import cookie_pairs
from sandboxes.proxy.routing import PreviewTarget

SCOPE_HEX_DIGITS = 10
# RFC 6265's cookie-name is an RFC 2616 token.
TOKEN_CHARACTERS = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")


def platform_cookie_names() -> frozenset[str]:
    return frozenset(
        {
            settings.SESSION_COOKIE_NAME,
            settings.CSRF_COOKIE_NAME,
            settings.LANGUAGE_COOKIE_NAME,
            services.PREVIEW_COOKIE,
        }
    )


def scope_of(target: PreviewTarget) -> str:
    """The prefix of this preview's cookie names in path mode (one per sandbox and port)."""
    digest = hashlib.sha256(f"{target.sandbox_id}:{target.port}".encode()).hexdigest()
    return f"p{digest[:SCOPE_HEX_DIGITS]}_"


def for_app(scope: dict, target: PreviewTarget) -> str | None:
    """The Cookie header the app gets (None: none)."""
    if target.host_mode:
        hidden = platform_cookie_names()
        kept = [(name, value) for name, value in cookie_pairs(scope) if name not in hidden]
    else:
        prefix = scope_of(target)
        kept = [
            (name[len(prefix) :], value)
            for name, value in cookie_pairs(scope)
            if name.startswith(prefix) and len(name) > len(prefix)
        ]
    return "; ".join(f"{name}={value}" for name, value in kept) or None


def from_app(set_cookie: str, target: PreviewTarget) -> str | None:
    """The app's Set-Cookie as the browser gets it; None drops it (a platform cookie's name
    in host mode, or nothing this can read: what is not understood is not passed on)."""
    first, *attributes = [part.strip() for part in set_cookie.split(";")]
    name, equals, value = first.partition("=")
    name = name.strip()
    if not equals or not name or not set(name) <= TOKEN_CHARACTERS:
        return None
    kept = [a for a in attributes if a and _attribute(a) not in ("domain", "path")]
    if target.host_mode:
        if name in platform_cookie_names():
            return None
        path = [a for a in attributes if _attribute(a) == "path"]
        return "; ".join([f"{name}={value.strip()}", *path[-1:], *kept])
    own_path = next((_value(a) for a in reversed(attributes) if _attribute(a) == "path"), "/")
    if not own_path.startswith("/"):
        own_path = "/"  # RFC 6265 5.2.4: the default path then; here, the preview's root
    scoped = f"{scope_of(target)}{name}={value.strip()}"
    return "; ".join([scoped, f"Path={target.prefix}{own_path}", *kept])


def _attribute(text: str) -> str:
    return text.partition("=")[0].strip().lower()


def _value(text: str) -> str:
    return text.partition("=")[2].strip()
