"""The terminal websocket (ASGI): authorize, attach, then carry bytes both ways until the
terminal ends, the browser goes, or the user may no longer use it.

Frames: output goes to the browser as binary frames (the scrollback first, as the holder
replays it on attach); from the browser, binary frames or {"t": "i", "d": text} are typed,
{"t": "r", "cols": C, "rows": R} resizes. Uvicorn pings the browser (its ws_ping_interval)
so a dead network is noticed.

A refusal before the upgrade (another origin, a path that names no terminal) is an HTTP 403;
after it, the websocket is accepted and closed with a code the page acts on: 4401 sign in,
4403 not allowed, 4404 not found, 4410 the terminal ended, 4502 the host failed (the page
reconnects only after other closes, e.g. 1006 when the network dropped).

Output is read in a thread of the connection's own (a blocking read with a short timeout)
and handed to the event loop through a queue of at most OUTPUT_QUEUE_CHUNKS chunks: when the
browser reads slowly, the thread waits for room, and the holder in the sandbox keeps (a
bounded amount of) the rest: nothing here grows with what the terminal prints.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import re
import threading
from typing import Any

from sandboxes import services
from sandboxes.contract.errors import Conflict, NotFound, PermissionDenied, ServiceError
from sandboxes.http.dbthreads import in_db_thread
from sandboxes.terminal_ws.identity import Visitor, origin_refusal, still_signed_in, visitor

PATH_PREFIX = "/ws/sandboxes/"
_PATH = re.compile(
    r"^/ws/sandboxes/(?P<sandbox>[A-Za-z0-9_]{1,64})/terminals/(?P<terminal>[a-z0-9-]{1,64})/$"
)
OUTPUT_QUEUE_CHUNKS = 16  # of at most READ_BYTES each: 1 MiB per connection at worst
READ_BYTES = 65536
READ_TIMEOUT = 1.0  # how soon the reader notices its websocket closed
MAX_INPUT_BYTES = 1024 * 1024  # one message's input (a paste)
CHECK_SECONDS = 30.0  # how often access is checked again and activity recorded
ENDED, FORBIDDEN, MISSING, SIGN_IN, HOST_FAILED = 4410, 4403, 4404, 4401, 4502


def wants_terminal(scope: dict) -> bool:
    return scope["type"] == "websocket" and scope.get("path", "").startswith(PATH_PREFIX)


async def serve_terminal(scope: dict, receive: Any, send: Any) -> None:
    if (await receive())["type"] != "websocket.connect":
        return
    match = _PATH.match(scope.get("path", ""))
    if match is None or origin_refusal(scope) is not None:
        await send({"type": "websocket.close", "code": 1008})  # before accept: HTTP 403
        return
    found = await in_db_thread(visitor, scope)
    stream, code, reason = await _attach(found, match["sandbox"], match["terminal"])
    await send({"type": "websocket.accept"})
    if stream is None:
        await send({"type": "websocket.close", "code": code, "reason": reason[:120]})
        return
    connection = Connection(stream, found, match["sandbox"], match["terminal"], receive, send)
    await connection.run()


async def _attach(found: Visitor, sandbox_id: str, terminal_id: str):
    """(the stream, or None with the close code and reason that say why not)."""
    if found.principal is None:
        return None, SIGN_IN, "sign in to use terminals"
    try:
        stream = await in_db_thread(
            services.attach_terminal, found.principal, sandbox_id, terminal_id
        )
    except NotFound as exc:
        return None, MISSING, exc.message
    except PermissionDenied as exc:
        return None, FORBIDDEN, exc.message
    except Conflict as exc:
        return None, ENDED, exc.message
    except ServiceError as exc:
        code = ENDED if services.terminal_gone(exc) else HOST_FAILED
        return None, code, "the terminal ended" if code == ENDED else exc.message
    return stream, 0, ""


class Connection:
    def __init__(self, stream, found: Visitor, sandbox_id: str, terminal_id: str, receive, send):
        self.stream, self.found = stream, found
        self.sandbox_id, self.terminal_id = sandbox_id, terminal_id
        self.receive, self.send = receive, send
        self.output: asyncio.Queue[bytes] = asyncio.Queue(maxsize=OUTPUT_QUEUE_CHUNKS)
        self.stopped = threading.Event()
        self.active = False  # input or output since the last check
        self.loop = asyncio.get_running_loop()

    async def run(self) -> None:
        reader = threading.Thread(target=self._read, name="terminal-reader", daemon=True)
        reader.start()
        tasks = [
            asyncio.ensure_future(self._forward_output()),
            asyncio.ensure_future(self._take_input()),
            asyncio.ensure_future(self._keep_checking()),
        ]
        try:
            done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            close = next(iter(done)).result()
        finally:
            for task in tasks:
                task.cancel()
            self.stopped.set()
            await in_db_thread(self.stream.close)
        if close is not None:
            with contextlib.suppress(Exception):  # the browser may be gone already
                await self.send({"type": "websocket.close", "code": close[0], "reason": close[1]})

    # --- output: the reader thread, then the event loop ----------------------------------------
    def _read(self) -> None:
        while not self.stopped.is_set():
            try:
                data = self.stream.read(READ_BYTES, timeout=READ_TIMEOUT)
            except TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - the sandbox or the host went: the terminal ended
                data = b""
            if not self._hand_over(data) or not data:
                return

    def _hand_over(self, data: bytes) -> bool:
        """Put a chunk in the queue, waiting for room; False if the connection closed."""
        future = asyncio.run_coroutine_threadsafe(self.output.put(data), self.loop)
        while True:
            try:
                future.result(timeout=READ_TIMEOUT)
                return True
            except concurrent.futures.TimeoutError:
                if self.stopped.is_set():
                    future.cancel()
                    return False
            except (concurrent.futures.CancelledError, RuntimeError):
                return False  # the loop is closing

    async def _forward_output(self) -> tuple[int, str]:
        while True:
            data = await self.output.get()
            if not data:
                return ENDED, "the terminal ended"
            self.active = True
            await self.send({"type": "websocket.send", "bytes": data})

    # --- input -------------------------------------------------------------------------------
    async def _take_input(self) -> tuple[int, str] | None:
        while True:
            message = await self.receive()
            if message["type"] == "websocket.disconnect":
                return None
            data = message.get("bytes")
            if data is None:
                data, size = _parse(message.get("text") or "")
                if size is not None:
                    await asyncio.to_thread(self.stream.resize, *size)
                    continue
            if len(data) > MAX_INPUT_BYTES:
                return 1009, f"input over {MAX_INPUT_BYTES} bytes in one message"
            if data:
                self.active = True
                try:
                    await asyncio.to_thread(self.stream.write, data)
                except Exception:  # noqa: BLE001 - the terminal is gone: the reader says so
                    return ENDED, "the terminal ended"

    # --- access ------------------------------------------------------------------------------
    async def _keep_checking(self) -> tuple[int, str]:
        while True:
            await asyncio.sleep(CHECK_SECONDS)
            active, self.active = self.active, False
            if not await in_db_thread(self._still_allowed, active):
                return FORBIDDEN, "you may no longer use this terminal"

    def _still_allowed(self, active: bool) -> bool:
        principal = self.found.principal
        assert principal is not None
        return still_signed_in(self.found) and services.terminal_seen(
            principal, self.sandbox_id, self.terminal_id, active=active
        )


def _parse(text: str) -> tuple[bytes, tuple[int, int] | None]:
    """A text frame: (input, None) or (b"", (cols, rows)); anything else is ignored."""
    try:
        message = json.loads(text)
    except ValueError:
        return b"", None
    if not isinstance(message, dict):
        return b"", None
    if message.get("t") == "i" and isinstance(message.get("d"), str):
        return message["d"].encode("utf-8", "surrogateescape"), None
    cols, rows = message.get("cols"), message.get("rows")
    if message.get("t") == "r" and _small_int(cols, 1000) and _small_int(rows, 500):
        return b"", (cols, rows)  # type: ignore[return-value]  # both checked to be ints
    return b"", None


def _small_int(value: object, maximum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= maximum
