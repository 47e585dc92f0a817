"""One HTTP exchange between a browser (ASGI) and an app in a sandbox (HTTP/1.1 over a port
stream, spoken with h11).

Bodies stream both ways in chunks, never held whole: a request body is sent as the browser
sends it (while the answer may already be coming), the answer's body is passed on as it
arrives, paced by the browser (ASGI's send waits while the client's socket is full, and the
port stream's window holds the app back). One stream per exchange (`Connection: close`):
opening one costs a round trip to the sandbox's agent, and no idle stream is kept.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import anyio
import h11

from sandboxes.proxy import credentials
from sandboxes.proxy.ports import AsyncPort
from sandboxes.proxy.routing import PreviewTarget

# Headers that describe one connection, not the message (RFC 9110 §7.6.1), and the ones the
# proxy sets itself.
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
SET_BY_PROXY = frozenset(
    {b"host", b"cookie", b"forwarded", b"x-forwarded-for", b"x-forwarded-host"}
    | {b"x-forwarded-proto", b"x-forwarded-prefix", b"x-real-ip"}
    # uvicorn answered the browser's `Expect: 100-continue` itself; the body is on its way.
    | {b"expect"}
)
# uvicorn writes its own.
SET_BY_SERVER = frozenset({b"date", b"server"})
# A path-mode preview shares the platform's origin: its pages run as an opaque origin, so
# their scripts can neither read the platform's cookies nor call its API as the viewer.
PATH_MODE_CSP = (
    b"sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads "
    b"allow-popups-to-escape-sandbox"
)


class AppFailed(Exception):
    """The app's side broke before an answer began (502 with this message)."""


def upstream_target(scope: dict, target: PreviewTarget, query: str) -> bytes:
    """The request target the app sees: the path after the preview's prefix, as the browser
    encoded it, and the query without the preview token."""
    raw = scope.get("raw_path") or quote(scope.get("path", "/")).encode()
    prefix = target.prefix.encode()
    path = raw[len(prefix) :] if prefix and raw.startswith(prefix) else raw
    if target.prefix and not raw.startswith(prefix):
        path = quote(target.path).encode()
    path = path or b"/"
    return path + (b"?" + query.encode("latin-1") if query else b"")


def forwarded_headers(scope: dict, target: PreviewTarget) -> list[tuple[bytes, bytes]]:
    headers: list[tuple[bytes, bytes]] = [(b"host", f"localhost:{target.port}".encode())]
    for name, value in scope.get("headers", []):
        if name not in HOP_BY_HOP and name not in SET_BY_PROXY:
            headers.append((name, value))
    cookie = credentials.app_cookie_header(scope)
    if cookie:
        headers.append((b"cookie", cookie.encode("latin-1")))
    client = scope.get("client")
    if client:
        headers.append((b"x-forwarded-for", str(client[0]).encode()))
    host = credentials.header(scope, b"host")
    if host:
        headers.append((b"x-forwarded-host", host.encode("latin-1")))
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    headers.append((b"x-forwarded-proto", scheme.encode()))
    if target.prefix:
        headers.append((b"x-forwarded-prefix", target.prefix.encode()))
    return headers


def request_framing(scope: dict) -> list[tuple[bytes, bytes]]:
    """How the request body is framed towards the app: the browser's Content-Length, or
    chunked when it sent a body without one; nothing when there is no body."""
    # Transfer-Encoding wins over a Content-Length sent with it (RFC 9112 §6.3), as the
    # server that decoded the body read it: the app must frame it the same way, or a body
    # could carry a second request past the proxy (request smuggling).
    if credentials.header(scope, b"transfer-encoding") is not None:
        return [(b"transfer-encoding", b"chunked")]
    length = credentials.header(scope, b"content-length")
    if length is not None:
        return [(b"content-length", length.encode())]
    return []


def answer_headers(
    headers: list[tuple[bytes, bytes]], target: PreviewTarget
) -> list[tuple[bytes, bytes]]:
    """The app's response headers as the browser gets them."""
    kept: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        name = name.lower()
        if name in HOP_BY_HOP or name in SET_BY_SERVER:
            continue
        if name == b"set-cookie" and credentials.sets_platform_cookie(value.decode("latin-1")):
            continue
        if name == b"location" and target.prefix:
            value = _prefixed_location(value, target)
        kept.append((name, value))
    if not target.host_mode:
        kept.append((b"content-security-policy", PATH_MODE_CSP))
    return kept


def _prefixed_location(value: bytes, target: PreviewTarget) -> bytes:
    """A redirect to the app's own path (`/next`, or http://localhost:PORT/next) stays in the
    preview; anything else is left as the app wrote it."""
    text = value.decode("latin-1")
    parts = urlsplit(text)
    own = parts.hostname in ("localhost", "127.0.0.1") and parts.port == target.port
    if (not parts.scheme and not parts.netloc and text.startswith("/")) or own:
        rest = parts.path + (f"?{parts.query}" if parts.query else "")
        rest += f"#{parts.fragment}" if parts.fragment else ""
        return (target.prefix + (rest or "/")).encode("latin-1")
    return value


async def exchange(
    scope: dict, receive, send, port: AsyncPort, target: PreviewTarget, query: str
) -> None:
    """Send the browser's request to the app and its answer back. Raises AppFailed when the
    app broke off before answering (nothing was sent to the browser then)."""
    conn = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method=scope["method"],
        target=upstream_target(scope, target, query),
        headers=[
            *forwarded_headers(scope, target),
            *request_framing(scope),
            (b"connection", b"close"),
        ],
    )
    await port.write(conn.send(request))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_send_body, receive, conn, port, tasks.cancel_scope)
        await _answer(conn, port, send, target)
        # The answer is complete: whatever the browser still sends is moot.
        tasks.cancel_scope.cancel()


async def _send_body(receive, conn: h11.Connection, port: AsyncPort, scope_to_cancel) -> None:
    """The browser's body to the app; then wait for the browser to go away, which ends the
    exchange (and, through the stream's close, whatever thread still waits on the app)."""
    body_done = conn.our_state is not h11.SEND_BODY
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope_to_cancel.cancel()
            return
        if body_done:
            continue
        chunk = message.get("body", b"")
        if chunk:
            await port.write(conn.send(h11.Data(data=chunk)))
        if not message.get("more_body", False):
            await port.write(conn.send(h11.EndOfMessage()))
            body_done = True


async def _next_event(conn: h11.Connection, port: AsyncPort):
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await port.read())


async def _answer(conn: h11.Connection, port: AsyncPort, send, target: PreviewTarget) -> None:
    try:
        event = await _next_event(conn, port)
        while isinstance(event, h11.InformationalResponse):  # 100 Continue: ours to drop
            event = await _next_event(conn, port)
    except h11.RemoteProtocolError as exc:
        raise AppFailed(f"the app on port {target.port} gave no valid HTTP answer ({exc})") from exc
    if not isinstance(event, h11.Response):
        raise AppFailed(f"the app on port {target.port} closed the connection without answering")
    await send(
        {
            "type": "http.response.start",
            "status": event.status_code,
            "headers": answer_headers(list(event.headers), target),
        }
    )
    while True:
        event = await _next_event(conn, port)  # a protocol error now ends the response short
        if isinstance(event, h11.Data):
            await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
