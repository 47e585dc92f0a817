"""OpenTelemetry traces of MCP calls, when SANDHUB_MCP_TRACING is on (docs/tracing.md).

On: the process gets the OpenTelemetry SDK's tracer provider, exporting in batches over
OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (the standard OTEL_* variables configure the
exporter, the batching and the service name; default service name "sandhub"). FastMCP opens
its own spans then (server.py sets its telemetry mode), and this module adds:

- one span per tool call, `mcp.tool <name>`, with the tool's name, the calling team's id and
  the outcome (ok, tool_error: the caller was told what to change, error: anything else);
- a child span per service call (`service <function>`) made through mcp_bridge.runtime,
  which is where the call's time goes (the database, the backend's exec).

Never the arguments' contents, the output, error messages or any key: a span carries names,
ids and outcomes only. FastMCP's spans record an exception's message and traceback (a
message may quote an argument: "sandbox sb_x not found"), so the exporter is wrapped in
one that drops exception events and status descriptions (tracing_export.py). FastMCP's
spans also carry `enduser.id`: the API key's public prefix (shk_xxxxxxxx), never the key.
Off: no provider, no middleware; runtime asks one module flag.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from fastmcp.exceptions import ToolError
from fastmcp.server import FastMCP
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from opentelemetry import trace

from mcp_bridge import identity

TRACER_NAME = "sandhub.mcp"

_enabled = False  # read by service_span on every service call: the whole cost when off
_install_lock = threading.Lock()
_NOT_TRACED = contextlib.nullcontext()


def install(mcp: FastMCP) -> None:
    """Open a span per tool call on this server (server.build_server, when tracing is on).
    Without start_exporting in the process, OpenTelemetry's default no-op provider gets them."""
    mcp.add_middleware(TracedCalls())


def start_exporting() -> None:
    """Set up the exporting provider, once per process (the web's http_app, `manage.py mcp`)
    and turn the service spans on."""
    global _enabled
    with _install_lock:
        if not _enabled:
            # Imported here: a process without tracing never loads the SDK and exporter.
            from mcp_bridge.tracing_export import set_up_provider

            set_up_provider()
            _enabled = True


def enabled() -> bool:
    return _enabled


class TracedCalls(Middleware):
    """A span around every tool call, with what may be known about it and nothing more."""

    async def on_call_tool(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        tool = str(context.message.name)
        tracer = trace.get_tracer(TRACER_NAME)
        with tracer.start_as_current_span(
            f"mcp.tool {tool}",
            kind=trace.SpanKind.SERVER,
            attributes={"gen_ai.tool.name": tool, "mcp.method.name": "tools/call"},
            record_exception=False,  # an exception's message may quote the arguments
            set_status_on_exception=False,
        ) as span:
            _set_team(span)
            try:
                result = await call_next(context)
            except ToolError:
                _outcome(span, "tool_error", "ToolError")
                raise
            except Exception as exc:
                _outcome(span, "error", type(exc).__qualname__)
                raise
            _outcome(span, "ok", None)
            return result


def _set_team(span: trace.Span) -> None:
    key = identity.checked_key.get()  # over HTTP: the key this request was checked with
    if key is not None:
        span.set_attribute("sandhub.team.id", key.team_id)


def _outcome(span: trace.Span, outcome: str, error_type: str | None) -> None:
    span.set_attribute("sandhub.outcome", outcome)
    if error_type is not None:
        span.set_attribute("error.type", error_type)
        span.set_status(trace.StatusCode.ERROR)


def service_span(fn: Callable[..., Any]) -> contextlib.AbstractContextManager[Any]:
    """A child span for a service call when tracing is on; else a shared no-op."""
    if not _enabled:
        return _NOT_TRACED
    return _service_span(getattr(fn, "__name__", "call"))


@contextlib.contextmanager
def _service_span(name: str) -> Iterator[None]:
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"service {name}",
        attributes={"sandhub.service": name},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            raise
