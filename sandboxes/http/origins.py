"""Origins and headers of an ASGI scope, as the two ASGI interfaces (the preview proxy and the
terminal websocket) compare them to decide whom a request comes from."""

from __future__ import annotations

from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


def header(scope: dict, name: bytes) -> str | None:
    """The first value of a (lower-case) header, or None."""
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def origin_key(origin: str) -> tuple[str, str, int] | None:
    """An origin as compared: scheme, host, port (the default one filled in); None for
    `null` and anything that is no http(s) origin."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]
