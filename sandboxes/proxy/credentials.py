"""What a preview request carries to prove who sends it, and which of its cookies the app
may see.

The browser sends the platform's own cookies (the session, CSRF) to a path-mode preview as
to any page of this origin; the app in the sandbox is a tenant's code and must never see
them, nor set them: both directions are filtered here.
"""

from __future__ import annotations

from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlencode

from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.sessions.backends.base import SessionBase
from django.utils.module_loading import import_string

from sandboxes import services


def platform_cookie_names() -> frozenset[str]:
    return frozenset(
        {
            settings.SESSION_COOKIE_NAME,
            settings.CSRF_COOKIE_NAME,
            settings.LANGUAGE_COOKIE_NAME,
            services.PREVIEW_COOKIE,
        }
    )


def header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def cookies(scope: dict) -> dict[str, str]:
    jar: dict[str, str] = {}
    for key, value in scope.get("headers", []):
        if key != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            name, _, content = part.strip().partition("=")
            if name:
                jar.setdefault(name, content)
    return jar


def app_cookie_header(scope: dict) -> str | None:
    """The Cookie header the app gets: the browser's, without the platform's cookies."""
    hidden = platform_cookie_names()
    kept = [f"{name}={value}" for name, value in cookies(scope).items() if name not in hidden]
    return "; ".join(kept) or None


def sets_platform_cookie(set_cookie: str) -> bool:
    """Whether a Set-Cookie from the app would set (or clear) one of the platform's."""
    try:
        parsed = SimpleCookie(set_cookie)
    except CookieError:
        return True  # what cannot be parsed here is not passed on either
    return any(name in platform_cookie_names() for name in parsed)


def query_without_token(query_string: bytes) -> tuple[str | None, str]:
    """(the token in the query, if any; the query without it)."""
    pairs = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    token = next((v for k, v in pairs if k == services.PREVIEW_TOKEN_PARAM), None)
    rest = urlencode([(k, v) for k, v in pairs if k != services.PREVIEW_TOKEN_PARAM])
    return token, rest


@dataclass(frozen=True)
class SessionUser:
    user_id: int | None
    session_key: str | None


def session_user(session_key: str | None) -> SessionUser:
    """The authenticated user of a Django session (blocking: run it in a thread). Checked
    as Django checks it for a page: the session exists and its password hash still holds."""
    if not session_key:
        return SessionUser(None, None)
    store: type[SessionBase] = import_string(settings.SESSION_ENGINE + ".SessionStore")
    user = get_user(SimpleNamespace(session=store(session_key)))  # type: ignore[arg-type]
    if not user.is_authenticated:
        return SessionUser(None, None)
    return SessionUser(user.pk, session_key)
