"""The web process: Django (pages, admin, REST API, static files for the API docs), the MCP
streamable-HTTP endpoint at /mcp/ and the preview proxy (sandboxes/proxy/), in one ASGI
application.

Run it with `uvicorn platform_site.asgi:application`. Add `--proxy-headers` behind a reverse
proxy so audit rows record the client's address rather than the proxy's.
"""

from __future__ import annotations

import asyncio
import os

from django.core.asgi import get_asgi_application

from platform_site.private_files import restrict_umask

restrict_umask()  # what the process creates is its owner's alone (private_files.py)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
django_app = get_asgi_application()  # sets Django up before anything imports models

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from e2b_compat.routing import envd_scope  # noqa: E402
from mcp_bridge.bodylimit import with_clear_refusals  # noqa: E402
from mcp_bridge.server import http_app  # noqa: E402
from platform_site.gcpolicy import settle_long_lived_process  # noqa: E402
from platform_site.metrics import endpoint as metrics_endpoint  # noqa: E402
from platform_site.metrics.exposition import process_exiting  # noqa: E402
from platform_site.metrics.requests import METRICS_PATH, instrumented  # noqa: E402
from sandboxes.housekeeping import liveness, poolagents  # noqa: E402
from sandboxes.http.dbthreads import in_db_thread  # noqa: E402
from sandboxes.proxy.app import serve_preview  # noqa: E402
from sandboxes.proxy.routing import wants_preview  # noqa: E402
from sandboxes.terminal_ws.app import serve_terminal, wants_terminal  # noqa: E402

MCP_PATH = "/mcp/"
mcp_app = with_clear_refusals(http_app(MCP_PATH))  # 413 and 401 as JSON-RPC errors
# Static files (the API docs' Swagger UI comes from drf-spectacular-sidecar, no CDN) are
# served here from the app directories, whatever DEBUG says: django.conf.urls.static only
# works with DEBUG on, and whitenoise is not a dependency. They are few and small; a
# deployment with a reverse proxy may serve STATIC_ROOT (collectstatic) instead.
web_app = ASGIStaticFilesHandler(django_app)
settle_long_lived_process()  # what is imported by now lives as long as the process (gcpolicy.py)


async def dispatch(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        # Django's handler refuses lifespan events; the MCP app needs its startup (it starts
        # the session manager), so the lifespan is the MCP app's.
        await mcp_app(scope, keeping_pool_agents(receive), send)
        return
    if (envd := envd_scope(scope)) is not None:  # 49983-SANDBOX.<domain>: E2B's envd
        await web_app(envd, receive, send)
        return
    if scope["type"] in ("http", "websocket") and wants_preview(scope):
        # A preview host name (every path on it is the app's) or /preview/SANDBOX/PORT/.
        await serve_preview(scope, receive, send)
        return
    if wants_terminal(scope):  # /ws/sandboxes/SANDBOX/terminals/TERMINAL/ (terminal_ws/)
        await serve_terminal(scope, receive, send)
        return
    if scope["type"] == "websocket":  # previews and terminals are the only websockets served
        await send({"type": "websocket.close", "code": 1008})
        return
    path = scope.get("path", "")
    if path == MCP_PATH.rstrip("/"):
        # `/mcp` without the slash: serve it rather than answer a redirect clients may not follow.
        scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode()}
        path = MCP_PATH
    if path.startswith(MCP_PATH):
        await mcp_app(scope, receive, send)
        return
    if path == METRICS_PATH and metrics_endpoint.enabled():  # off: Django's 404, as any address
        await metrics_endpoint.serve_metrics(scope, receive, send)
        return
    await web_app(scope, receive, send)


application = instrumented(dispatch)  # every HTTP request counted and timed (/metrics)


def keeping_pool_agents(receive):
    """The lifespan's messages, with this web process keeping agents in the warm pool's
    members while it serves (sandboxes/housekeeping/poolagents.py)."""

    async def received():
        message = await receive()
        if message["type"] == "lifespan.startup":
            # This process's liveness lease: its commands are closed at once if it dies. Taken
            # and released in a worker thread whose connection is closed after (in_db_thread).
            await in_db_thread(liveness.start)
            poolagents.start()
        elif message["type"] == "lifespan.shutdown":
            await asyncio.to_thread(poolagents.stop)
            await in_db_thread(liveness.stop)
            process_exiting()
        return message

    return received
