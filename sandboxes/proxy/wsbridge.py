"""One websocket between a browser (ASGI) and an app in a sandbox, bridged message by
message: the proxy is a websocket client of the app (websockets' sans-I/O protocol over the
port stream) and passes text and binary messages, and the close, both ways. Pings and
pongs are answered on each side by its own protocol stack."""

from __future__ import annotations

import anyio
from websockets.client import ClientProtocol
from websockets.datastructures import Headers
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

from sandboxes.proxy import credentials
from sandboxes.proxy.ports import AsyncPort
from sandboxes.proxy.routing import PreviewTarget

MAX_MESSAGE = 16 * 1024 * 1024
CLOSE_WAIT_SECONDS = 2.0
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
    cookie = credentials.app_cookie_header(scope)
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


async def bridge(receive, send, protocol: ClientProtocol, port: AsyncPort, early: list) -> None:
    """Pass messages both ways until either side closes. Only _from_app reads the port."""
    app_done = anyio.Event()
    browser_gone = anyio.Event()

    async def from_app() -> None:
        try:
            await _from_app(send, protocol, port, early, browser_gone)
        finally:
            app_done.set()
            tasks.cancel_scope.cancel()  # the app closed: stop waiting for the browser

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(from_app)
        await _from_browser(receive, protocol, port)
        browser_gone.set()
        with anyio.move_on_after(CLOSE_WAIT_SECONDS):  # the app's answer to our close
            await app_done.wait()
        tasks.cancel_scope.cancel()


async def _from_browser(receive, protocol: ClientProtocol, port: AsyncPort) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            if protocol.state is State.OPEN:
                protocol.send_close(message.get("code") or 1000)
                await _flush(protocol, port)
            return
        if message["type"] != "websocket.receive" or protocol.state is not State.OPEN:
            continue
        if message.get("text") is not None:
            protocol.send_text(message["text"].encode())
        else:
            protocol.send_binary(message.get("bytes") or b"")
        await _flush(protocol, port)


async def _from_app(
    send, protocol: ClientProtocol, port: AsyncPort, early: list, browser_gone
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
