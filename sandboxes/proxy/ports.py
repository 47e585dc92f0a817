"""The backend's port stream (blocking) driven from the event loop.

Every read and write runs in a thread of the proxy's own pool: an idle websocket holds one
thread in read() for as long as it is open, and must not take them from the pool that runs
MCP and API calls. close() is what unblocks a thread still inside read() or write().
How many connections one sandbox or team may hold at once is fairshare.py's business.

The stream's own errors become ProxyFailures here (PortBroken; AppTimedOut when nothing came
within the read timeout), so the callers handle one family of failures.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import anyio
import anyio.to_thread
from django.conf import settings

from sandboxes.http.dbthreads import with_fresh_connection
from sandboxes.proxy.failures import AppTimedOut, PortBroken

CHUNK = 64 * 1024

_limiters: weakref.WeakKeyDictionary[Any, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def _limiter() -> anyio.CapacityLimiter:
    import asyncio

    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(settings.SANDHUB_PREVIEW_THREADS)
    return limiter


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn(*args) in the proxy's pool. A cancelled caller (the browser went away) does not
    wait for the thread: the stream's close() ends whatever it was blocked on."""
    return await anyio.to_thread.run_sync(
        functools.partial(fn, *args, **kwargs), limiter=_limiter(), abandon_on_cancel=True
    )


async def service_call(fn: Any, *args: Any) -> Any:
    """A service call in the proxy's pool, with Django's connection hygiene around it: these
    threads are not Django requests, so nothing else would close their connections (with
    PostgreSQL and DB_CONN_MAX_AGE 0, one would stay open per thread)."""
    return await in_thread(with_fresh_connection, fn, *args)


class AsyncPort:
    """The stream, awaitable. read_timeout: seconds a read waits for the app's first byte
    (None: as long as it takes; a bridged websocket has its own idle timeout instead)."""

    def __init__(self, stream: Any, read_timeout: float | None = None) -> None:
        self.stream = stream
        self.read_timeout = read_timeout
        self.received = 0  # bytes the app sent so far
        self.closed = False

    async def read(self, max_bytes: int = CHUNK) -> bytes:
        data = await in_thread(self._read, max_bytes, self.read_timeout)
        self.received += len(data)
        return data

    async def write(self, data: bytes) -> None:
        if data:
            await in_thread(self._call, self.stream.write, data)

    async def close_write(self) -> None:
        await in_thread(self._call, self.stream.close_write)

    def _read(self, max_bytes: int, timeout: float | None) -> bytes:
        try:
            return self.stream.read(max_bytes, timeout=timeout)
        except TimeoutError:
            raise AppTimedOut(f"the app answered nothing for {timeout:g} s") from None
        except Exception as exc:  # the stream's contract: BackendError, after closing anything
            raise PortBroken(f"the connection to the app broke ({exc})") from exc

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            raise PortBroken(f"the connection to the app broke ({exc})") from exc

    def close(self) -> None:
        """Never blocks for long and never raises (the stream's contract)."""
        if not self.closed:
            self.closed = True
            self.stream.close()
