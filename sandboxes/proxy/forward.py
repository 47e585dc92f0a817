"""One HTTP exchange between a browser (ASGI) and an app in a sandbox (HTTP/1.1 over a port
stream, spoken with h11).

Bodies stream both ways in chunks, never held whole: a request body is sent as the browser
sends it (while the answer may already be coming), the answer's body is passed on as it
arrives, paced by the browser (ASGI's send waits while the client's socket is full, and the
port stream's window holds the app back). One stream per exchange (`Connection: close`):
opening one costs a round trip to the sandbox's agent, and no idle stream is kept.
"""

from __future__ import annotations

from urllib.parse import quote

import anyio
import h11

from sandboxes.proxy import answers, cookies, credentials, replies
from sandboxes.proxy.answers import HOP_BY_HOP
from sandboxes.proxy.failures import AppFailed
from sandboxes.proxy.ports import AsyncPort
from sandboxes.proxy.routing import PreviewTarget

# Headers the proxy sets itself towards the app.
SET_BY_PROXY = frozenset(
    {b"host", b"cookie", b"forwarded", b"x-forwarded-for", b"x-forwarded-host"}
    | {b"x-forwarded-proto", b"x-forwarded-prefix", b"x-real-ip"}
    # uvicorn answered the browser's `Expect: 100-continue` itself; the body is on its way.
    | {b"expect"}
)
_SILENT = "the app on port {port} closed the connection without answering"


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
    cookie = cookies.for_app(scope, target)
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


async def exchange(
    scope: dict, receive, send, port: AsyncPort, target: PreviewTarget, query: str
) -> None:
    """Send the browser's request to the app and its answer back. Raises a ProxyFailure
    when the app's side broke (before or while answering)."""
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
        await _answer(conn, port, send, scope, target)
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


async def _next_event(conn: h11.Connection, port: AsyncPort, target: PreviewTarget):
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:  # headers over 16 KB are one of these
            if not port.received:
                raise AppFailed(_SILENT.format(port=target.port)) from None
            message = f"the app on port {target.port} gave no valid HTTP answer ({exc})"
            raise AppFailed(message) from exc
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await port.read())


async def _answer(conn: h11.Connection, port: AsyncPort, send, scope, target) -> None:
    event = await _next_event(conn, port, target)
    while isinstance(event, h11.InformationalResponse):  # 100 Continue: ours to drop
        event = await _next_event(conn, port, target)
    if not isinstance(event, h11.Response):
        raise AppFailed(_SILENT.format(port=target.port))
    headers, off_site = answers.for_browser(event.status_code, list(event.headers), scope, target)
    if off_site is not None:
        await replies.off_site(send, off_site, headers)
        return
    await send({"type": "http.response.start", "status": event.status_code, "headers": headers})
    while True:
        event = await _next_event(conn, port, target)  # a failure now cuts the response short
        if isinstance(event, h11.Data):
            await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
