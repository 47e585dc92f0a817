"""One websocket between a browser (ASGI) and an app in a sandbox, bridged message by
message: the proxy is a websocket client of the app (websockets' sans-I/O protocol over the
port stream) and passes text and binary messages, and the close, both ways. Pings and
pongs are answered on each side by its own protocol stack. A websocket with no message
either way for SANDHUB_PREVIEW_WEBSOCKET_IDLE_SECONDS is closed (1001 to both sides): an
open one holds a thread of the proxy's pool and a slot of its tenant's share."""

from __future__ import annotations

import anyio
from websockets.client import ClientProtocol
from websockets.datastructures import Headers
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from sandboxes.proxy import cookies, credentials
from sandboxes.proxy.ports import AsyncPort
from sandboxes.proxy.routing import PreviewTarget

MAX_MESSAGE = 16 * 1024 * 1024
CLOSE_WAIT_SECONDS = 2.0
IDLE_CLOSE_CODE = 1001  # going away
# Codes that only report a close (RFC 6455 §7.4.1): never sent in a close frame.
UNSENDABLE_CLOSE_CODES = frozenset({1005, 1006, 1015})
# What the browser's handshake carries that the app's handshake must carry too.
PASSED_HEADERS = (b"origin", b"user-agent", b"authorization")


class HandshakeRefused(Exception):
    """The app did not accept the websocket (it answered this HTTP status instead)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the app answered {status} to the websocket handshake")
        self.status = status


async def _flush(protocol: ClientProtocol, port: AsyncPort) -> None:
    data = b"".join(protocol.data_to_send())
    if data:
        await port.write(data)


async def _feed(protocol: ClientProtocol, port: AsyncPort) -> bool:
    """One read from the app into the protocol; False at end of stream."""
    chunk = await port.read()
    if chunk:
        protocol.receive_data(chunk)
    else:
        protocol.receive_eof()
    await _flush(protocol, port)  # pongs, the answer to a close
    return bool(chunk)


async def app_handshake(
    scope: dict, port: AsyncPort, target: PreviewTarget, path: bytes
) -> tuple[ClientProtocol, str | None, list]:
    """Open the websocket to the app; (protocol, the subprotocol it chose, frames it
    already sent). Raises HandshakeRefused."""
    uri = parse_uri(f"ws://localhost:{target.port}{path.decode('latin-1')}")
    offered = [Subprotocol(p) for p in scope.get("subprotocols") or []]
    protocol = ClientProtocol(uri, subprotocols=offered or None, max_size=MAX_MESSAGE)
    request = protocol.connect()
    for name in PASSED_HEADERS:
        value = credentials.header(scope, name)
        if value is not None:
            request.headers[name.decode()] = value
    cookie = cookies.for_app(scope, target)
    if cookie:
        request.headers["Cookie"] = cookie
    protocol.send_request(request)
    await _flush(protocol, port)
    while True:
        if not await _feed(protocol, port):
            raise HandshakeRefused(502)
        events = protocol.events_received()
        if events:
            break
    response = events[0]
    if not isinstance(response, Response) or protocol.state is not State.OPEN:
        raise HandshakeRefused(getattr(response, "status_code", 502))
    chosen = Headers(response.headers).get("Sec-WebSocket-Protocol")
    return protocol, chosen, events[1:]


class Idle:
    """When the last message went either way; `expired` waits until none came for long."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.last = anyio.current_time()

    def touch(self) -> None:
        self.last = anyio.current_time()

    async def expired(self) -> None:
        while (left := self.last + self.seconds - anyio.current_time()) > 0:
            await anyio.sleep(left)


async def bridge(
    receive, send, protocol: ClientProtocol, port: AsyncPort, early: list, idle: Idle
) -> None:
    """Pass messages both ways until either side closes or the websocket idles. Only
    _from_app reads the port."""
    app_done = anyio.Event()
    browser_gone = anyio.Event()
    idled = False

    async def from_app() -> None:
        try:
            await _from_app(send, protocol, port, early, browser_gone, idle)
        finally:
            app_done.set()
            tasks.cancel_scope.cancel()  # the app closed: stop waiting for the browser

    async def watch() -> None:
        nonlocal idled
        await idle.expired()
        if not browser_gone.is_set():  # else the close is under way already
            idled = True
            tasks.cancel_scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(from_app)
        tasks.start_soon(watch)
        await _from_browser(receive, protocol, port, idle)
        browser_gone.set()
        with anyio.move_on_after(CLOSE_WAIT_SECONDS):  # the app's answer to our close
            await app_done.wait()
        tasks.cancel_scope.cancel()
    if idled:
        await _close_idle(send, protocol, port)


async def _close_idle(send, protocol: ClientProtocol, port: AsyncPort) -> None:
    await send({"type": "websocket.close", "code": IDLE_CLOSE_CODE})
    if protocol.state is State.OPEN:
        protocol.send_close(IDLE_CLOSE_CODE, "idle")
        with anyio.move_on_after(CLOSE_WAIT_SECONDS):  # an app that reads nothing: let go
            await _flush(protocol, port)


async def _from_browser(receive, protocol: ClientProtocol, port: AsyncPort, idle: Idle) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            if protocol.state is State.OPEN:
                code = message.get("code") or 1000
                protocol.send_close(1000 if code in UNSENDABLE_CLOSE_CODES else code)
                await _flush(protocol, port)
            return
        if message["type"] != "websocket.receive" or protocol.state is not State.OPEN:
            continue
        idle.touch()
        if message.get("text") is not None:
            protocol.send_text(message["text"].encode())
        else:
            protocol.send_binary(message.get("bytes") or b"")
        await _flush(protocol, port)


async def _from_app(
    send, protocol: ClientProtocol, port: AsyncPort, early: list, browser_gone, idle: Idle
) -> None:
    parts: list[bytes] = []
    opcode = Opcode.TEXT
    pending = list(early)
    while True:
        for frame in pending:
            if not isinstance(frame, Frame):
                continue
            if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                opcode, parts = frame.opcode, [frame.data]
            elif frame.opcode is Opcode.CONT:
                parts.append(frame.data)
            elif frame.opcode is Opcode.CLOSE:
                if not browser_gone.is_set():
                    await send({"type": "websocket.close", "code": protocol.close_code or 1000})
                return
            else:
                continue  # ping / pong: answered by the protocol itself
            if frame.fin and not browser_gone.is_set():
                data = b"".join(parts)
                if opcode is Opcode.TEXT:
                    await send({"type": "websocket.send", "text": data.decode()})
                else:
                    await send({"type": "websocket.send", "bytes": data})
        if not await _feed(protocol, port):
            if not browser_gone.is_set():
                await send({"type": "websocket.close", "code": 1011})  # the app went away
            return
        pending = protocol.events_received()
        if pending:
            idle.touch()
