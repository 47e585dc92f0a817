"""platform_site.asgi with its Prometheus instruments taken out: no HTTP wrapper, the MCP
call middleware a pass-through, nothing recorded. bench_metrics.py serves it beside the
real application to measure what the instrumentation costs a call."""

from __future__ import annotations

import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
django.setup()  # before the middleware's module, which imports models

from mcp_bridge import callmetrics  # noqa: E402
from sandboxes.metrics import instruments  # noqa: E402


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


async def _pass_through(self: Any, context: Any, call_next: Any) -> Any:
    return await call_next(context)


instruments.http_request = _nothing
instruments.mcp_call = _nothing
instruments.command_finished = _nothing
callmetrics.CallMetrics.on_call_tool = _pass_through  # type: ignore[method-assign]

from platform_site.asgi import dispatch as application  # noqa: E402

__all__ = ["application"]
