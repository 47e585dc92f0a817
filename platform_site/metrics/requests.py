"""Every HTTP request the web process answers, counted and timed by route group.

An ASGI wrapper around the whole application (platform_site/asgi.py), so pages, the REST
API, the MCP endpoint, previews and the admin are measured alike, including what a view
never sees (a 404 from the resolver, a 413 from the MCP SDK). The group is told from the
address alone: a label per path would grow a series per sandbox and per file.
Websockets (terminals, previews' sockets) are not requests with a status and are left out.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sandboxes.metrics import instruments
from sandboxes.proxy.routing import wants_preview

Scope = dict[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

METRICS_PATH = "/metrics"
_PREFIXES = (("/mcp", "mcp"), ("/api/", "api"), ("/admin/", "admin"), ("/static/", "static"))


def route_group(scope: Scope) -> str:
    if wants_preview(scope):
        return "preview"
    path = scope.get("path", "")
    if path == METRICS_PATH:
        return "metrics"
    for prefix, group in _PREFIXES:
        if path.startswith(prefix):
            return group
    return "pages"


def instrumented(app: App) -> App:
    async def observed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await app(scope, receive, sending)
        except Exception:
            status = status or 500  # what the server answers for an app that raised
            raise
        finally:
            seconds = time.perf_counter() - started
            instruments.http_request(scope.get("method", ""), route_group(scope), status, seconds)

    return observed
