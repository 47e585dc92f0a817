"""The preview proxy's ASGI entry: authorize, open the port stream, forward.

Every refusal is the same 404 whatever its reason (no such sandbox, another team's, no
open preview on that port, no or a stale token): a preview's address tells a stranger
nothing. A token that arrives in the query (a link) is swapped for a cookie scoped to this
preview and dropped from the address by a redirect, so it never reaches the app, its logs
or a Referer.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import anyio
from django.conf import settings
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import NotFound, ServiceError
from sandboxes.proxy import credentials, forward, routing, wsbridge
from sandboxes.proxy.ports import AsyncPort, service_call

logger = logging.getLogger("sandhub.previews")
ACTIVITY_SECONDS = 60.0


async def serve_preview(scope: dict, receive: Any, send: Any) -> None:
    target = routing.target_for(scope)
    if target is None:
        await _refuse(scope, send, 404, "not found")
        return
    if scope["type"] == "http" and not target.host_mode and not target.path:
        await _redirect(send, _address(target.prefix + "/", scope.get("query_string", b"")))
        return
    token_in_query, query = credentials.query_without_token(scope.get("query_string", b""))
    jar = credentials.cookies(scope)
    token = token_in_query or jar.get(services.PREVIEW_COOKIE)
    if token_in_query and scope["type"] == "http":
        # The link's token becomes this preview's cookie (unless a member's session let the
        # request in: then the session does, whatever the token); the address loses it.
        try:
            grant = await service_call(_authorize, scope, target, token, jar)
        except NotFound:
            await _refuse(scope, send, 404, "not found")
            return
        where = _address((target.prefix or "") + (target.path or "/"), query.encode("latin-1"))
        cookie = _token_cookie(scope, target, grant) if grant.token else None
        await _redirect(send, where, cookie=cookie)
        return
    try:
        # Authorized and opened in one call: one thread hop, the sandbox read once.
        grant, stream = await service_call(_authorize, scope, target, token, jar, True)
    except NotFound:
        await _refuse(scope, send, 404, "not found")
        return
    except ServiceError as exc:
        await _refuse(scope, send, 502, exc.message)
        return
    port = AsyncPort(stream)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_keep_active, grant)
            if scope["type"] == "websocket":
                await _websocket(scope, receive, send, port, target, query)
            else:
                await forward.exchange(scope, receive, send, port, target, query)
            tasks.cancel_scope.cancel()
    except forward.AppFailed as exc:
        await _refuse(scope, send, 502, str(exc))
    finally:
        port.close()


async def _keep_active(grant: Any) -> None:
    """A long download or an open websocket is use of the sandbox: the idle sweep must not
    take it while it lasts (opening the stream counted once already)."""
    while True:
        await anyio.sleep(ACTIVITY_SECONDS)
        await service_call(services.record_preview_activity, grant)


def _authorize(
    scope: dict, target: routing.PreviewTarget, token: str | None, jar: dict, open_it: bool = False
) -> Any:
    """The grant (blocking: run in a thread); with open_it, (grant, the opened stream)."""
    session = credentials.session_user(jar.get(settings.SESSION_COOKIE_NAME))
    client = scope.get("client")
    request = services.PreviewRequest(
        sandbox_id=target.sandbox_id,
        port=target.port,
        user_id=session.user_id,
        session_key=session.session_key,
        token=token,
        address=str(client[0]) if client else None,
    )
    if open_it:
        return services.open_preview(request)
    return services.authorize_preview(request)


async def _websocket(scope, receive, send, port: AsyncPort, target, query: str) -> None:
    path = forward.upstream_target(scope, target, query)
    try:
        protocol, subprotocol, early = await wsbridge.app_handshake(scope, port, target, path)
    except wsbridge.HandshakeRefused as exc:
        logger.info("preview websocket refused by the app: %s", exc)
        await send({"type": "websocket.close", "code": 1011})
        return
    message = await receive()  # websocket.connect
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept", "subprotocol": subprotocol})
    await wsbridge.bridge(receive, send, protocol, port, early)


def _address(path: str, query: bytes) -> str:
    return path + (f"?{query.decode('latin-1')}" if query else "")


def _token_cookie(scope: dict, target: routing.PreviewTarget, grant: Any) -> str:
    expires: datetime | None = grant.token_expires_at
    max_age = max(0, int((expires - timezone.now()).total_seconds())) if expires else 3600
    parts = [
        f"{services.PREVIEW_COOKIE}={grant.token}",
        f"Path={target.cookie_path}",
        f"Max-Age={max_age}",
        "HttpOnly",
        "SameSite=Lax",
    ]
    if scope.get("scheme") == "https":
        parts.append("Secure")
    return "; ".join(parts)


async def _redirect(send: Any, location: str, cookie: str | None = None) -> None:
    headers = [(b"location", location.encode("latin-1")), (b"cache-control", b"no-store")]
    if cookie:
        headers.append((b"set-cookie", cookie.encode("latin-1")))
    headers.append((b"content-length", b"0"))
    await send({"type": "http.response.start", "status": 302, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _refuse(scope: dict, send: Any, status: int, message: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008 if status == 404 else 1011})
        return
    body = f"{message}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
