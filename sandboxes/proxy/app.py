"""The preview proxy's ASGI entry: check the origin and the tenant's share, authorize, open
the port stream, forward.

In order, each step cheap before the next costs more: the address (404), the origin the
request comes from (403, origins.py), the sandbox's share of connections (503, before any
database read), authorization and the stream (one service call in a thread), the team's
share (503). Every refusal of authorization is the same 404 whatever its reason (no such
sandbox, another team's, no open preview on that port, no or a stale token): a preview's
address tells a stranger nothing. A token that arrives in the query (a link) is swapped for
a cookie scoped to this preview and dropped from the address by a redirect, so it never
reaches the app, its logs or a Referer.

When the app's side breaks (a failure inside the exchange's task groups, hence an
ExceptionGroup), the browser gets 502 (504 when the app went silent) and the log one line;
once the answer has begun, the connection is cut instead.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime
from typing import Any

import anyio
from django.conf import settings
from django.utils import timezone

from sandboxes import services
from sandboxes.contract.errors import NotFound, ServiceError
from sandboxes.proxy import credentials, fairshare, forward, origins, replies, routing, wsbridge
from sandboxes.proxy.failures import ProxyFailure, first_failure
from sandboxes.proxy.ports import AsyncPort, service_call
from sandboxes.proxy.sites import log_shared_site

logger = logging.getLogger("sandhub.previews")
ACTIVITY_SECONDS = 60.0
log_shared_site()  # once, as the web process loads the proxy


async def serve_preview(scope: dict, receive: Any, send: Any) -> None:
    target = routing.target_for(scope)
    if target is None:
        await replies.refuse(scope, send, 404, "not found")
        return
    if scope["type"] == "http" and not target.host_mode and not target.path:
        query = scope.get("query_string", b"")
        await replies.redirect(send, _address(target.prefix + "/", query))
        return
    refused = origins.refusal(scope)
    if refused is not None:
        await replies.refuse(scope, send, 403, refused)
        return
    share = fairshare.Share()
    try:
        over = share.take_sandbox(target.sandbox_id)
        if over is not None:
            await _over_share(scope, send, over)
            return
        await _authorized(scope, receive, send, target, share)
    finally:
        share.release()


async def _authorized(scope, receive, send, target: routing.PreviewTarget, share) -> None:
    token_in_query, query = credentials.query_without_token(scope.get("query_string", b""))
    jar = credentials.cookies(scope)
    token = token_in_query or jar.get(services.PREVIEW_COOKIE)
    if token_in_query and scope["type"] == "http":
        # The link's token becomes this preview's cookie (unless a member's session let the
        # request in: then the session does, whatever the token); the address loses it.
        try:
            grant = await service_call(_authorize, scope, target, token, jar)
        except NotFound:
            await replies.refuse(scope, send, 404, "not found")
            return
        where = _address((target.prefix or "") + (target.path or "/"), query.encode("latin-1"))
        cookie = _token_cookie(scope, target, grant) if grant.token else None
        await replies.redirect(send, where, cookie=cookie)
        return
    try:
        # Authorized and opened in one call: one thread hop, the sandbox read once.
        grant, stream, team = await service_call(_authorize, scope, target, token, jar, True)
    except NotFound:
        await replies.refuse(scope, send, 404, "not found")
        return
    except ServiceError as exc:
        await replies.refuse(scope, send, 502, exc.message)
        return
    port = AsyncPort(stream, read_timeout=settings.SANDHUB_PREVIEW_READ_TIMEOUT_SECONDS)
    try:
        over = share.take_team(team)
        if over is not None:
            await _over_share(scope, send, over)
            return
        await _forwarded(scope, receive, send, port, target, query, grant)
    finally:
        port.close()


async def _forwarded(scope, receive, send, port: AsyncPort, target, query: str, grant) -> None:
    """The exchange or the websocket, and what the browser gets when the app's side broke."""
    reply = replies.Tracked(send)
    failure: ProxyFailure | None = None
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_keep_active, grant)
            if scope["type"] == "websocket":
                await _websocket(scope, receive, reply, port, target, query)
            else:
                await forward.exchange(scope, receive, reply, port, target, query)
            tasks.cancel_scope.cancel()
    except Exception as exc:  # an ExceptionGroup from the task groups, or one failure
        failure = first_failure(exc)
        if failure is None:
            raise  # not the app's side: a bug of the proxy, loud as such
    if failure is not None:
        await _failed(scope, reply, target, failure)


async def _failed(scope, reply: replies.Tracked, target, failure: ProxyFailure) -> None:
    logger.warning(
        "preview %s port %s: %s (%s)", target.sandbox_id, target.port, failure, failure.status
    )
    if scope["type"] == "websocket":
        with contextlib.suppress(OSError):  # the browser may be gone already
            await reply({"type": "websocket.close", "code": 1011})
    elif not reply.started:
        await replies.refuse(scope, reply, failure.status, str(failure))
    # else the answer began: returning without ending it makes the server cut the connection,
    # so the browser sees a broken response, never a short one taken for whole.


async def _over_share(scope: dict, send: Any, message: str) -> None:
    retry = fairshare.RETRY_AFTER_SECONDS
    await replies.refuse(scope, send, 503, message, retry_after=retry)


async def _keep_active(grant: Any) -> None:
    """A long download or an open websocket is use of the sandbox: the idle sweep must not
    take it while it lasts (opening the stream counted once already)."""
    while True:
        await anyio.sleep(ACTIVITY_SECONDS)
        await service_call(services.record_preview_activity, grant)


def _authorize(
    scope: dict, target: routing.PreviewTarget, token: str | None, jar: dict, open_it: bool = False
) -> Any:
    """The grant (blocking: run in a thread); with open_it, (grant, the opened stream, the
    grant's team)."""
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
    if not open_it:
        return services.authorize_preview(request)
    grant, stream = services.open_preview(request)
    return grant, stream, grant.team_id


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
    port.read_timeout = None  # from now on the websocket's own idle timeout governs
    idle = wsbridge.Idle(settings.SANDHUB_PREVIEW_WEBSOCKET_IDLE_SECONDS)
    await wsbridge.bridge(receive, send, protocol, port, early, idle)


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
