"""The command runner: POST a command, get its output streamed back while it runs.

services.run_command blocks until the command ends and reports output through its
on_output callback, so it runs in a thread of its own; the callback hands chunks to a
`_Pump`, which wakes the response's async iterator on the server's event loop (no worker
thread waits on a queue per open response). The response is NDJSON, one event a line, read
incrementally by the page's script (templates/web/sandbox/_runner.html):

    {"t": "out", "s": "stdout" | "stderr", "d": text}
    {"t": "note", "d": text}                       output skipped: the reader fell behind
    {"t": "end", "id", "status", "exit_code", "duration", "truncated", "url", ...}
    {"t": "error", "d": message}                   the service refused or failed

A form posted without the script gets the same stream as a plain HTML page.

The command is recorded and audited once, by the service, whatever the browser does: a
browser that goes away stops the stream, not the command, which keeps its timeout.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from django.db import connections
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.templatetags.static import static
from django.urls import reverse
from django.utils.html import escape
from django.views.decorators.http import require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.results import CommandResult
from sandboxes.web.ansi import AnsiRenderer
from sandboxes.web.principal import identity_for, team_required
from sandboxes.web.sandbox_forms import RunForm
from tenants.principal import Principal

logger = logging.getLogger(__name__)

# Output waiting for a slow reader, at most; more is dropped (and said so) until it catches
# up. The command's stored history keeps its own head and tail regardless.
MAX_PENDING_BYTES = 4 * 1024 * 1024
STREAM_HEADER = "X-Sandhub-Stream"  # "ndjson" from the page's script


class _Pump:
    """Items from the command's thread to the response's async iterator."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: deque[tuple[Any, ...]] = deque()
        self._pending = 0
        self._skipped = 0
        self._waker: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._closed = False

    def put(self, item: tuple[Any, ...]) -> None:
        with self._lock:
            if self._closed:
                return  # nobody reads any more: the command runs on, its output is dropped
            size = len(item[2]) if item[0] == "out" else 0
            if size and self._pending + size > MAX_PENDING_BYTES:
                self._skipped += size
                return
            if self._skipped:
                self._items.append(("note", self._skipped))
                self._skipped = 0
            self._items.append(item)
            self._pending += size
            waker = self._waker
        if waker is not None:
            loop, event = waker
            # A closed loop (the server shutting down) has nobody to wake.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._items.clear()

    async def items(self) -> AsyncIterator[tuple[Any, ...]]:
        """Every item until (and including) the closing "end" or "error"."""
        event = asyncio.Event()
        with self._lock:
            self._waker = (asyncio.get_running_loop(), event)
        while True:
            event.clear()  # before draining: a put after the drain sets it again
            with self._lock:
                batch = list(self._items)
                self._items.clear()
                self._pending = 0
            for item in batch:
                yield item
                if item[0] in ("end", "error"):
                    return
            await event.wait()


def _run(pump: _Pump, principal: Principal, sandbox_id: str, command: str, timeout: Any) -> None:
    """The command, in its own thread; always ends the pump with "end" or "error"."""
    try:
        result = services.run_command(
            principal,
            sandbox_id,
            command,
            timeout=timeout,
            on_output=lambda stream, data: pump.put(("out", stream, data)),
        )
        pump.put(("end", result))
    except ServiceError as exc:
        pump.put(("error", exc.message))
    except Exception:
        logger.exception("command in sandbox %s failed", sandbox_id)
        pump.put(("error", "the command could not be run (an internal error; it is logged)"))
    finally:
        connections.close_all()  # this thread's own: a thread never reused keeps none open


def end_event(result: CommandResult) -> dict[str, Any]:
    return {
        "t": "end",
        "id": result.id,
        "status": result.status,
        "exit_code": result.exit_code,
        "duration": result.duration_seconds,
        "truncated": result.stdout_truncated or result.stderr_truncated,
        "stdout_bytes": result.stdout_bytes,
        "stderr_bytes": result.stderr_bytes,
        "error": result.error_message,
        "url": reverse("web:sandbox-command", args=[result.sandbox_id, result.id]),
        "resumed_seconds": result.resumed_seconds,
    }


async def _events(pump: _Pump) -> AsyncIterator[dict[str, Any]]:
    """The pump's items as events: bytes decoded as UTF-8 across chunk boundaries, and runs
    of one stream's chunks that arrived together merged into one event."""
    decoders = {
        name: codecs.getincrementaldecoder("utf-8")(errors="replace")
        for name in ("stdout", "stderr")
    }
    try:
        async for item in pump.items():
            kind = item[0]
            if kind == "out":
                text = decoders.get(item[1], decoders["stdout"]).decode(item[2])
                if text:
                    yield {"t": "out", "s": item[1], "d": text}
            elif kind == "note":
                yield {"t": "note", "d": f"[{item[1]} bytes of output not shown: see history]"}
            elif kind == "end":
                yield end_event(item[1])
            else:
                yield {"t": "error", "d": item[1]}
    finally:
        pump.close()  # the browser went away, or the stream ended: drop further output


async def _ndjson(pump: _Pump) -> AsyncIterator[bytes]:
    async for event in _events(pump):
        yield json.dumps(event).encode() + b"\n"


async def _html(pump: _Pump, back: str) -> AsyncIterator[bytes]:
    """The stream as a plain page, for a form posted without the page's script: browsers
    render a page as it arrives, so the output still shows while the command runs."""
    colours = AnsiRenderer()  # escapes the text, turns SGR colours into classes (ansi.py)
    yield (
        '<!doctype html><meta charset="utf-8"><title>Command · Sandhub</title>'
        f'<link rel="stylesheet" href="{static("web/ansi.css")}">'
        '<pre class="output" id="run-output">'
    ).encode()
    async for event in _events(pump):
        if event["t"] == "out":
            yield colours.feed(event["d"]).encode()
        elif event["t"] == "note":
            yield escape(event["d"]).encode()
        elif event["t"] == "end":
            yield colours.finish().encode()
            truncated = " (output truncated)" if event["truncated"] else ""
            resumed = event["resumed_seconds"]
            first = f" (resumed the sandbox first: {resumed:.2f} s)" if resumed is not None else ""
            yield (
                f'</pre><p>{escape(event["status"])}: exit code <span id="run-exit">'
                f"{event['exit_code']}</span> after {event['duration'] or 0:.2f} s"
                f"{first}{truncated}</p>"
            ).encode()
        else:
            yield f'</pre><p class="error" role="alert">{escape(event["d"])}</p>'.encode()
    yield f'<p><a href="{escape(back)}">Back to the sandbox</a></p>'.encode()


@team_required
@require_POST
def run(request: HttpRequest, sandbox_id: str) -> HttpResponseBase:
    identity = identity_for(request)
    principal = identity.principal
    form = RunForm(request.POST)
    if not form.is_valid():
        message = " ".join(str(e) for errors in form.errors.values() for e in errors)
        return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")
    command, timeout = form.cleaned_data["command"], form.cleaned_data["timeout"]
    try:
        # Before any streaming, so these answer with their own status: another team's or a
        # missing sandbox (404), one not running (409), and for a reader the service's own
        # refusal of the command (403): it refuses before anything runs.
        info = services.get_sandbox(principal, sandbox_id)
        # A paused or stopped sandbox is resumed by the command's service (the end event
        # says how long that took).
        if info.status not in ("running", "paused", "stopped"):
            return HttpResponse(
                f"sandbox {sandbox_id} is {info.status}, not running",
                status=409,
                content_type="text/plain; charset=utf-8",
            )
        pump = _Pump()
        if not identity.can_write:
            # Refused here, before anything runs; should the role have changed meanwhile,
            # the command has run and its result is the whole stream.
            result = services.run_command(principal, sandbox_id, command, timeout=timeout)
            pump.put(("out", "stdout", result.stdout.encode()))
            pump.put(("out", "stderr", result.stderr.encode()))
            pump.put(("end", result))
    except ServiceError as exc:
        return HttpResponse(
            exc.message, status=exc.http_status, content_type="text/plain; charset=utf-8"
        )
    if identity.can_write:
        threading.Thread(
            target=_run,
            args=(pump, principal, sandbox_id, command, timeout),
            name=f"web-command-{sandbox_id}",
            daemon=True,
        ).start()
    if request.headers.get(STREAM_HEADER) == "ndjson":
        response = StreamingHttpResponse(_ndjson(pump), content_type="application/x-ndjson")
    else:
        back = reverse("web:sandbox", args=[sandbox_id])
        response = StreamingHttpResponse(_html(pump, back), content_type="text/html")
    # Nothing between here and the browser may hold the stream back.
    response["Cache-Control"] = "no-cache, no-transform"
    response["X-Accel-Buffering"] = "no"
    return response
