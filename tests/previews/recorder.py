"""A loopback app for the proxy's browser and security tests: HTTP and websockets on one
port (websockets' threaded server), answering from a table of routes and recording what
reached it (path and headers of every request). Not a test module.

Each route answers GET with a fixed status, headers and body; a path not in the table is
200 with the app's name. A websocket says hello with the app's name, then echoes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.sync.server import ServerConnection, serve

_QUIET = logging.getLogger("tests.recorder")
_QUIET.setLevel(logging.WARNING)  # not a line per request in every failing test's output


@dataclass(frozen=True)
class Route:
    body: bytes = b""
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "text/html; charset=utf-8"


@dataclass(frozen=True)
class Seen:
    path: str
    headers: dict[str, str]  # lower-case names

    @property
    def cookie(self) -> str:
        return self.headers.get("cookie", "")


@dataclass
class RecordingApp:
    name: str
    routes: dict[str, Route] = field(default_factory=dict)
    # Answer with CORS headers that let any origin read, credentials included: a permissive
    # development server, as the cross-origin read tests need one on the victim's side.
    reflect_cors: bool = False
    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    def _process(self, connection: ServerConnection, request: Request) -> Response | None:
        headers = {name.lower(): value for name, value in request.headers.raw_items()}
        self.seen.append(Seen(request.path, headers))
        if headers.get("upgrade", "").lower() == "websocket":
            return None  # the handshake goes on
        route = self.routes.get(request.path.split("?", 1)[0]) or Route(
            f"app {self.name}\n".encode(), content_type="text/plain"
        )
        answer = Headers([("Content-Type", route.content_type), *route.headers])
        answer["Content-Length"] = str(len(route.body))
        origin = headers.get("origin")
        if self.reflect_cors and origin:
            answer["Access-Control-Allow-Origin"] = origin
            answer["Access-Control-Allow-Credentials"] = "true"
        return Response(route.status, "OK", answer, route.body)

    def _talk(self, connection: ServerConnection) -> None:
        try:
            connection.send(f"hello from {self.name}")
            for message in connection:
                connection.send(f"{self.name} echoes {message!s}")
        except ConnectionClosed:
            pass

    def paths(self) -> list[str]:
        return [seen.path for seen in self.seen]


@contextmanager
def running(app: RecordingApp) -> Iterator[RecordingApp]:
    """Serve the app on a free loopback port while the block runs."""
    server = serve(
        app._talk,
        "127.0.0.1",
        0,
        process_request=app._process,
        compression=None,
        ping_interval=None,
        logger=_QUIET,
    )
    app.port = server.socket.getsockname()[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield app
    finally:
        server.shutdown()
        thread.join(5)
