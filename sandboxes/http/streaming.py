"""Streamed downloads from a sandbox for the HTTP interfaces (REST and the web pages): one
chunk in memory at a time, under ASGI too, and the sandbox's stream closed as soon as the
response is done with it."""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from django.utils.http import content_disposition_header


class DownloadStream(StreamingHttpResponse):
    """A streamed response over a synchronous iterator that stays streaming under ASGI and
    releases its source as soon as it is done with it.

    Django's ASGI handler reads a sync iterator whole into memory before sending anything
    (StreamingHttpResponse.__aiter__); here each chunk is fetched in a worker thread instead,
    so a large download holds one chunk at a time. Under WSGI it is an ordinary stream.

    The source (e.g. a backend's open stream) is closed when the response is closed (WSGI
    servers, the test client and Django's ASGI handler close the responses they finish) and
    when an ASGI client goes away mid-stream, where Django's handler closes only the async
    iterator: either way at once, not whenever the garbage collector gets to it.
    """

    def __init__(self, source: Iterator[bytes], **kwargs: Any) -> None:
        super().__init__(source, **kwargs)  # registers source.close with the response
        self._source = source

    def close_source(self) -> None:
        close = getattr(self._source, "close", None)
        if close is not None:
            close()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = iter(cast(Iterator[bytes], self.streaming_content))  # a sync source
        done = object()

        def read() -> object:
            return next(chunks, done)

        fetch = sync_to_async(read, thread_sensitive=False)
        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                # Shielded: a cancelled response must not abandon a read still running in
                # its thread (the finally below waits for it).
                pending = asyncio.ensure_future(fetch())
                part = await asyncio.shield(pending)
                pending = None
                if part is done:
                    break
                yield cast(bytes, part)
        finally:
            if pending is not None:
                # Cut short during a read: let it end before closing what it reads from (a
                # generator cannot be closed while it runs in another thread).
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await pending
            await sync_to_async(self.close_source, thread_sensitive=False)()


def download(
    source: Iterator[bytes], path: str, *, suffix: str = "", content_type: str = ""
) -> DownloadStream:
    """`source` as an attachment named after the last part of `path` (plus `suffix`)."""
    name = (posixpath.basename(path.rstrip("/")) or "download") + suffix
    response = DownloadStream(source, content_type=content_type or "application/octet-stream")
    response["Content-Disposition"] = (
        content_disposition_header(as_attachment=True, filename=name) or "attachment"
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response
