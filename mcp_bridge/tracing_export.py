"""Where tracing.py's spans go: the OpenTelemetry SDK's provider, batching them to the OTLP/HTTP
exporter, through a filter that drops what might quote a caller's arguments. Loaded only
when SANDHUB_MCP_TRACING is on."""

from __future__ import annotations

import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

DEFAULT_SERVICE_NAME = "sandhub"


def set_up_provider() -> None:
    name = os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    # The exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT and the
    # processor OTEL_BSP_*; the provider flushes what is left when the process exits.
    provider.add_span_processor(BatchSpanProcessor(RedactingExporter(OTLPSpanExporter())))
    trace.set_tracer_provider(provider)


class RedactingExporter(SpanExporter):
    """Passes spans on without exception events (message, traceback) or status descriptions
    (FastMCP's spans record both, and a message may quote an argument: "sandbox sb_x not
    found"). The error's type stays, in the error.type attribute."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._inner.export([_redacted(span) for span in spans])

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _redacted(span: ReadableSpan) -> ReadableSpan:
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=[event for event in span.events if event.name != "exception"],
        links=span.links,
        kind=span.kind,
        status=trace.Status(span.status.status_code),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )
