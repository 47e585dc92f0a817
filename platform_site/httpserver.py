"""The HTTP/1.1 protocol the web process runs under uvicorn: uvicorn's httptools protocol with a
limit on each request's head (request line and headers), enforced before the parser sees it.

uvicorn hands every byte it reads to httptools, whose parser holds a header's value (and
uvicorn the URL) in memory until it ends: one `GET /login/` with 200 MB of headers was answered
200 and grew a worker by 400 MB, kept. Here the bytes of each head are counted as they arrive
and only fed to the parser while the head stays within SANDHUB_MAX_REQUEST_HEAD_BYTES; past
it the client gets 431 with `Connection: close`, nothing more is parsed, and the connection
ends. Websocket upgrade requests are heads like any other.

Bodies are not counted. A body of known length is fed up to its length, so the next request on
the connection (keep-alive or pipelined) is counted from its own first byte. A chunked body is
fed in pieces of CHUNKED_PIECE_BYTES; its framing and trailers (headers the parser holds like
any other) may not run past the limit between body bytes, and a head that begins in the piece
where a chunked body ends is charged every non-body byte of that piece: its own and the few
bytes of framing before it.

Run it with `uvicorn --http platform_site.httpserver:HeadLimitedHttpToolsProtocol`
(scripts/web.sh); the tests' live server uses it too (tests/conftest.py `asgi_server`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from platform_site.env import env_int

MAX_HEAD_BYTES = env_int("SANDHUB_MAX_REQUEST_HEAD_BYTES", 64 * 1024, minimum=8 * 1024)
# How long a refused connection's further bytes are read and dropped before it is closed.
# Closing a socket with unread bytes makes the kernel send a reset, and a client still sending
# its oversized head would get that instead of the 431.
LINGER_SECONDS = 2.0
# A chunked body's end is only known once the parser has passed it: the bytes of a pipelined
# head after it in the same piece are counted with the piece's framing.
CHUNKED_PIECE_BYTES = 8 * 1024
HEAD_END = b"\r\n\r\n"
REFUSAL_BODY = b"Request header fields too large.\n"


class HeadLimitedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes = MAX_HEAD_BYTES

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._in_head = True  # from a message's end (or the connection's start) to its headers
        self._begun = False  # the parser has seen the current head's first byte
        self._head_bytes = 0
        self._tail = b""  # the head's last bytes so far: its end may straddle two reads
        self._content_length: int | None = 0  # None: chunked
        self._body_total = 0  # body bytes the parser reported on this connection
        self._body_mark = 0  # _body_total when the current message's headers ended
        self._framing_run = 0  # chunked framing and trailer bytes since the last body bytes
        self._upgraded = False
        self._refusal_due = False  # over the limit while an earlier request is being answered
        self._refused = False
        self._linger: asyncio.TimerHandle | None = None

    # --- reading ------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        position = 0
        while position < len(data) and self._parsing():
            if self._in_head:
                position = self._feed_head(data, position)
            elif self._sized_body_left() > 0:
                position = self._feed_sized_body(data, position)
            else:
                position = self._feed_chunked_body(data, position)

    def _parsing(self) -> bool:
        stopped = self._upgraded or self._refused or self._refusal_due
        return not stopped and not self.transport.is_closing()

    def _feed_head(self, data: bytes, start: int) -> int:
        """Feed the head up to its end (or all of `data` if it goes on), within the limit."""
        room = self.max_head_bytes - self._head_bytes
        window = data[start : start + room]
        found = (self._tail + window).find(HEAD_END)
        if found < 0 and len(data) - start > room:
            self._over_limit()
            return len(data)
        end = start + found + len(HEAD_END) - len(self._tail) if found >= 0 else start + len(window)
        piece = data[start:end]
        # Before feeding: the parser's callbacks reset both when this piece ends the message.
        self._head_bytes += len(piece)
        self._tail = (self._tail + piece)[-(len(HEAD_END) - 1) :]
        super().data_received(piece)
        return end

    def _sized_body_left(self) -> int:
        if self._content_length is None:
            return 0
        return self._content_length - (self._body_total - self._body_mark)

    def _feed_sized_body(self, data: bytes, start: int) -> int:
        """Feed the body up to its length: whatever follows is the next request's head."""
        end = min(len(data), start + self._sized_body_left())
        super().data_received(data[start:end])
        return end

    def _feed_chunked_body(self, data: bytes, start: int) -> int:
        end = min(len(data), start + CHUNKED_PIECE_BYTES)
        piece = data[start:end]
        body_before = self._body_total
        super().data_received(piece)
        other = len(piece) - (self._body_total - body_before)  # framing, trailers, heads
        if self._in_head:
            if self._begun:  # the body ended in this piece, and the next head began there
                self._head_bytes, self._tail = other, piece[-(len(HEAD_END) - 1) :]
            return end
        self._framing_run = other if self._body_total > body_before else self._framing_run + other
        if self._framing_run > self.max_head_bytes:
            self._framing_over_limit()
        return end

    def _framing_over_limit(self) -> None:
        """Trailers (or chunk extensions) past the limit: the request's app is reading its
        body; it gets a disconnect, and the client a 431 unless a response (its own or an
        earlier pipelined request's) is under way, when the connection just ends."""
        self.logger.warning("%s - chunk framing or trailers over the limit", self._peer())
        answered = self.cycle.response_started or bool(self.pipeline)
        self.cycle.disconnected = True  # what the app sends from now on is dropped
        self.cycle.message_event.set()
        if answered:
            self.transport.close()
        else:
            self._refuse()

    # --- the parser's callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        self._begun = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._body_mark = self._body_total
        self._content_length = self._declared_length()
        self._framing_run = 0
        super().on_headers_complete()

    def _declared_length(self) -> int | None:
        """The body's length, None for chunked (the parser refuses other codings and a
        Content-Length beside Transfer-Encoding, so it is the one that frames the body)."""
        length = 0
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return None
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    return None
        return length

    def on_body(self, body: bytes) -> None:
        self._body_total += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._begun, self._head_bytes, self._tail = True, False, 0, b""

    def handle_websocket_upgrade(self) -> None:
        self._upgraded = True  # the bytes that follow are the websocket protocol's
        super().handle_websocket_upgrade()

    # --- refusing ------------------------------------------------------------------------

    def _over_limit(self) -> None:
        self.logger.warning(
            "%s - request head over %d bytes: 431", self._peer(), self.max_head_bytes
        )
        if self.pipeline or (self.cycle is not None and not self.cycle.response_complete):
            # An earlier request on this connection is still being answered: its response
            # goes first, then the 431 (on_response_complete).
            self._refusal_due = True
            self.flow.pause_reading()
            return
        self._refuse()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refusal_due and not self.pipeline and self.cycle.response_complete:
            self._refuse()

    def _refuse(self) -> None:
        self._refusal_due, self._refused = False, True
        self._unset_keepalive_if_required()
        if self.transport.is_closing():
            return
        head, defaults = [STATUS_LINE[431]], self.server_state.default_headers
        head += [name + b": " + value + b"\r\n" for name, value in defaults]
        head.append(b"content-type: text/plain; charset=utf-8\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(REFUSAL_BODY))
        self.transport.write(b"".join(head) + REFUSAL_BODY)
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the client reads the answer, then the end
        self.flow.resume_reading()  # what it still sends is read and dropped (data_received)
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
        super().connection_lost(exc)

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
