"""What a preview request carries to prove who sends it: the platform's session, the
preview token (in the query of a first visit, then a cookie). Which cookies the app itself
sees and sets is cookies.py's business."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlencode

from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.sessions.backends.base import SessionBase
from django.utils.module_loading import import_string

from sandboxes import services


def header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def cookie_pairs(scope: dict) -> list[tuple[str, str]]:
    """Every name=value the browser sent, in its order (a name may come twice)."""
    found: list[tuple[str, str]] = []
    for key, value in scope.get("headers", []):
        if key != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            name, _, content = part.strip().partition("=")
            if name:
                found.append((name, content))
    return found


def cookies(scope: dict) -> dict[str, str]:
    """The browser's cookies by name (the first of a name wins)."""
    jar: dict[str, str] = {}
    for name, content in cookie_pairs(scope):
        jar.setdefault(name, content)
    return jar


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
