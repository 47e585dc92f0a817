"""Running the synchronous service layer from async MCP handlers.

The ORM and the backends are synchronous; the MCP server is an asyncio app. Every service call
therefore runs in a worker thread (AnyIO's pool, which copies context variables, so the
request's access token is visible there), with Django's connection hygiene around it: these
threads are not Django requests, so nothing else would close their connections.

Live output is bridged the other way: a backend calls `on_output` from whatever thread reads
the command's streams; the callback only appends the chunk to a deque, which the async side
drains every tick into MCP progress and log notifications. A slow or vanished client
therefore never stalls the command. A command that is over before the first tick sends no
notifications at all: its result, which comes at once, carries the same output, and the
plain JSON answer is a fraction of the work of an event stream for both ends.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread
from django.conf import settings
from django.db import close_old_connections
from fastmcp import Context
from fastmcp.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPDeprecationWarning

from mcp_bridge.tracing import service_span
from sandboxes.contract.errors import ServiceError

T = TypeVar("T")
logger = logging.getLogger("sandhub.mcp")

TICK_SECONDS = 0.25  # how often output is forwarded while a command runs
HEARTBEAT_SECONDS = 1.0  # progress at least this often, output or not
MAX_LOG_CHARS = 4000  # one log notification
MAX_STREAMED_CHARS = 256 * 1024  # per call; the result still carries head and tail

# Log notifications are deprecated in the 2026-07-28 protocol, yet clients on the older one
# show them as the command's live output; progress messages carry it for the newer ones.
warnings.filterwarnings("ignore", "The logging capability is deprecated", MCPDeprecationWarning)

# Commands may run for up to an hour: they get threads of their own, so a crowd of long
# commands never starves the short calls (and the key checks) of AnyIO's default pool.
_command_limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _command_limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _command_limiters.get(loop)
    if limiter is None:
        limiter = _command_limiters[loop] = anyio.CapacityLimiter(
            settings.SANDHUB_MCP_COMMAND_THREADS
        )
    return limiter


def _guarded(error: type[Exception], fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    except ServiceError as exc:
        # The service's message is written for whoever called: hand it to the agent as is.
        raise error(exc.message) from exc
    except ToolError as exc:
        if error is ToolError:
            raise
        raise error(str(exc)) from exc
    finally:
        close_old_connections()


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a worker thread; ServiceError becomes an MCP ToolError."""
    with service_span(fn):
        return await anyio.to_thread.run_sync(
            functools.partial(_guarded, ToolError, fn, *args, **kwargs)
        )


async def call_long(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Like call(), for what may take minutes (a command, a deploy waiting for its port):
    in the pool kept for them, so short calls never wait behind it."""
    with service_span(fn):
        return await anyio.to_thread.run_sync(
            functools.partial(_guarded, ToolError, fn, *args, **kwargs),
            limiter=_command_limiter(),
        )


async def read(fn: Callable[..., T], *args: Any) -> T:
    """Like call(), for resources: errors become ResourceError."""
    with service_span(fn):
        return await anyio.to_thread.run_sync(functools.partial(_guarded, ResourceError, fn, *args))


class OutputPump:
    """Collects output chunks from any thread and forwards them to the MCP client."""

    def __init__(self, ctx: Context | None, label: str, timeout: float | None) -> None:
        self.ctx = ctx
        self.label = label
        self.timeout = timeout
        # Appended from the backend's thread, drained on the loop: deque operations are atomic.
        self.chunks: collections.deque[tuple[str, bytes]] = collections.deque()
        self.started = time.monotonic()
        self.streamed = 0
        self.last_line = ""
        self.last_beat = 0.0

    def on_output(self, stream: str, chunk: bytes) -> None:
        """Called by the backend from its own thread: only hand over, never block."""
        self.chunks.append((stream, chunk))

    async def flush(self, final: bool = False) -> None:
        texts: dict[str, list[str]] = {}
        while self.chunks:
            stream, chunk = self.chunks.popleft()
            texts.setdefault(stream, []).append(chunk.decode("utf-8", errors="replace"))
        for stream, parts in texts.items():
            await self._log(stream, "".join(parts))
        elapsed = time.monotonic() - self.started
        if texts or final or elapsed - self.last_beat >= HEARTBEAT_SECONDS:
            self.last_beat = elapsed
            state = "finished" if final else "running"
            message = f"{self.label}: {state} after {elapsed:.1f} s"
            if self.last_line:
                message += f"; last output: {self.last_line[-200:]}"
            if self.ctx is not None:
                await self._send(self.ctx.report_progress(round(elapsed, 2), self.timeout, message))

    async def _log(self, stream: str, text: str) -> None:
        lines = [line for line in text.splitlines() if line.strip()]
        if lines:
            self.last_line = lines[-1]
        if self.ctx is None or self.streamed >= MAX_STREAMED_CHARS:
            return
        text = text[: min(MAX_LOG_CHARS, MAX_STREAMED_CHARS - self.streamed)]
        self.streamed += len(text)
        level: Literal["warning", "info"] = "warning" if stream == "stderr" else "info"
        await self._send(self.ctx.log(text, level=level, logger_name=stream))

    @staticmethod
    async def _send(notification) -> None:
        try:
            await notification
        except Exception:  # a gone client must not stop the command or lose its record
            logger.debug("could not send a notification to the MCP client", exc_info=True)


async def call_streaming(
    ctx: Context | None,
    label: str,
    timeout: float | None,
    fn: Callable[..., T],
    *args: Any,
    **kwargs: Any,
) -> T:
    """Like call(), passing `on_output=`, and forwarding output while fn runs (from the first
    tick on: what is over before it is answered by its result alone)."""
    pump = OutputPump(ctx, label, timeout)
    task = asyncio.ensure_future(call_long(fn, *args, on_output=pump.on_output, **kwargs))
    try:
        streaming = False
        while not task.done():
            await asyncio.wait({task}, timeout=TICK_SECONDS)
            if not task.done():
                streaming = True
                await pump.flush()
        if streaming:  # the rest of the output, and "finished"
            await pump.flush(final=True)
    finally:
        if not task.done():  # the client went away: the command still finishes and is kept
            task.cancel()
    return task.result()
