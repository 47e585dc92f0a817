"""The request-head limit (platform_site/httpserver.py) in detail, against a small ASGI app:
under uvicorn in a thread on a loopback port (the real transport), and fed by hand in reads of
every size (where a head's end falls between two reads).

test_request_head_limit.py checks the web process as scripts/web.sh starts it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from platform_site.httpserver import MAX_HEAD_BYTES, HeadLimitedHttpToolsProtocol
from tests.live import free_port
from tests.platform.rawhttp import chunked, exchange, head, statuses

KIB = 1024
LIMIT = MAX_HEAD_BYTES
BODY = bytes(range(256)) * 400  # 100 KiB: longer than the limit


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers `METHOD PATH body=N` once it has read the whole body."""
    assert scope["type"] == "http"
    size, more = 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    text = f"{scope['method']} {scope['path']} body={size}".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(text)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": text})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    config = uvicorn.Config(
        echo,
        host="127.0.0.1",
        port=free_port(),
        log_level="error",
        lifespan="off",
        http=HeadLimitedHttpToolsProtocol,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield config.port
    server.should_exit = True
    thread.join(10)


def test_a_head_of_exactly_the_limit_passes_and_one_byte_more_gets_431(port):
    assert statuses(exchange(port, head("/at", size=LIMIT, close=True))) == [200]
    answer = exchange(port, head("/over", size=LIMIT + 1, close=True))
    assert statuses(answer) == [431]
    assert answer.endswith(b"Request header fields too large.\n")


def test_the_431_reaches_a_client_that_is_still_sending(port):
    """The client writes all of a 4 MB head before it reads: the server reads and drops the
    rest instead of closing on unread bytes (which would reset the connection)."""
    assert statuses(exchange(port, head("/", size=4 * 1024 * KIB, close=True))) == [431]


def test_bodies_are_not_counted(port):
    sized = head("/sized", method="POST", extra=(b"Content-Length: %d" % len(BODY),), close=True)
    assert exchange(port, sized + BODY).endswith(b"POST /sized body=102400")
    # 2,560 chunks of 40 bytes: more framing bytes than the limit, all of them body framing.
    stream = head("/chunked", method="POST", extra=(b"Transfer-Encoding: chunked",), close=True)
    assert exchange(port, stream + chunked(BODY, 40)).endswith(b"POST /chunked body=102400")


def test_a_websocket_upgrade_over_the_limit_gets_431(port):
    upgrade = (b"Connection: Upgrade", b"Upgrade: websocket", b"Sec-WebSocket-Version: 13")
    upgrade += (b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",)
    assert statuses(exchange(port, head("/ws", size=LIMIT + 1, extra=upgrade))) == [431]


def test_trailers_past_the_limit_get_431(port):
    """Trailers are headers after a chunked body, held by the parser like any other."""
    stream = head("/t", method="POST", extra=(b"Transfer-Encoding: chunked",), close=True)
    stream += b"4\r\nbody\r\n0\r\nX-Trailer: " + b"t" * (4 * LIMIT) + b"\r\n\r\n"
    assert statuses(exchange(port, stream)) == [431]


# --- pipelined requests, fed in reads of every size ---------------------------------------


def pipeline() -> tuple[bytes, list[int]]:
    """Requests in one stream, each head counted from its own first byte: every head but
    the last is under the limit, the bodies and the whole are far over it."""
    te, cl = b"Transfer-Encoding: chunked", b"Content-Length: %d" % len(BODY)
    requests = [
        (head("/a", size=LIMIT - 10), 200),
        (head("/chunked", method="POST", extra=(te,)) + chunked(BODY, 4000), 200),
        # Where the chunked body ends, the parser has gone on into the next head: that head
        # is charged the framing before it in the piece too (here at most 21 bytes: the ends
        # of three chunks, a size line and the last chunk).
        (head("/b", size=LIMIT - 21), 200),
        (head("/sized", size=LIMIT, method="POST", extra=(cl,)) + BODY, 200),
        (head("/c", size=LIMIT), 200),  # begins right where the sized body ends
        (head("/over", size=LIMIT + 1), 431),
        (head("/never-parsed"), None),
    ]
    stream = b"".join(request for request, _ in requests)
    return stream, [status for _, status in requests if status is not None]


class Transport(asyncio.Transport):
    """Just enough of a socket transport for uvicorn's protocol, in memory."""

    def __init__(self, protocol: HeadLimitedHttpToolsProtocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.written = bytearray()
        self.readable = asyncio.Event()
        self.readable.set()
        self.done = asyncio.Event()  # the write side ended or the connection closed
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(name)

    def write(self, data: Any) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.done.set()
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.done.set()

    def pause_reading(self) -> None:
        self.readable.clear()

    def resume_reading(self) -> None:
        self.readable.set()


async def feed_in_reads(stream: bytes, read_size: int) -> bytes:
    config = uvicorn.Config(echo, log_level="error", lifespan="off")
    protocol = HeadLimitedHttpToolsProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    transport = Transport(protocol)
    protocol.connection_made(transport)
    for start in range(0, len(stream), read_size):
        await transport.readable.wait()  # a paused transport reads nothing
        protocol.data_received(stream[start : start + read_size])
    await asyncio.wait_for(transport.done.wait(), 10)
    protocol.connection_lost(None)
    return bytes(transport.written)


@pytest.mark.parametrize("read_size", [1, 3, 4, 1000, LIMIT - 1, LIMIT + 1, 256 * KIB, 10**9])
def test_pipelined_requests_get_the_same_answers_however_the_reads_fall(read_size):
    stream, expected = pipeline()
    answers = asyncio.run(feed_in_reads(stream, read_size))
    assert statuses(answers) == expected
    assert answers.count(b"body=102400") == 2
