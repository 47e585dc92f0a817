"""What the proxy itself answers (never the app): refusals, redirects, the page that names an
off-site redirect; and a record of what was already sent to the browser."""

from __future__ import annotations

from typing import Any

from sandboxes.proxy import failpage, redirects, routing
from sandboxes.proxy.redirects import OffSite

# Websocket close codes for a refusal before accepting (the browser sees a failed handshake
# whatever the code; they tell the log): policy, try again later, server error.
CLOSE_CODES = {403: 1008, 404: 1008, 503: 1013}


class Tracked:
    """The ASGI send, remembering whether an answer began (a failure after that can only cut
    the connection) and whether a websocket was accepted."""

    def __init__(self, send: Any) -> None:
        self._send = send
        self.started = False
        self.accepted = False

    async def __call__(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "websocket.accept":
            self.accepted = True
        await self._send(message)


async def refuse(
    scope: dict, send: Any, status: int, message: str, retry_after: int | None = None
) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": CLOSE_CODES.get(status, 1011)})
        return
    headers = [(b"cache-control", b"no-store")]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    if status in PAGE_STATUSES and _wants_html(scope):
        # A person in a browser: what happened and how to start the app (failpage.py).
        page = failpage.page(status, message, routing.target_for(scope))
        headers += [
            (b"content-security-policy", failpage.CSP),
            (b"x-content-type-options", b"nosniff"),
        ]
        await _say(send, status, "text/html; charset=utf-8", page, headers)
        return
    await _say(send, status, "text/plain; charset=utf-8", f"{message}\n".encode(), headers)


# The app's side failed (failures.py): a browser gets a page saying so; programs (and every
# other refusal) the plain text line.
PAGE_STATUSES = frozenset({502, 504})


def _wants_html(scope: dict) -> bool:
    accept = dict(scope.get("headers") or []).get(b"accept", b"")
    return b"text/html" in accept.lower()


async def redirect(send: Any, location: str, cookie: str | None = None) -> None:
    headers = [(b"location", location.encode("latin-1")), (b"cache-control", b"no-store")]
    if cookie:
        headers.append((b"set-cookie", cookie.encode("latin-1")))
    headers.append((b"content-length", b"0"))
    await send({"type": "http.response.start", "status": 302, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def off_site(send: Any, where: OffSite, app_headers: list[tuple[bytes, bytes]]) -> None:
    """The page instead of a redirect out of the preview; the app's cookies (already made
    its own) are still set, as a login that redirects elsewhere expects."""
    headers = [(b"cache-control", b"no-store")]
    headers += [(name, value) for name, value in app_headers if name == b"set-cookie"]
    headers += [
        (b"content-security-policy", redirects.PAGE_CSP),
        (b"referrer-policy", b"no-referrer"),
        (b"x-content-type-options", b"nosniff"),
    ]
    await _say(send, 200, "text/html; charset=utf-8", redirects.page(where), headers)


async def _say(
    send: Any, status: int, content_type: str, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
