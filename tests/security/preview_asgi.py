"""Driving the ASGI application (platform_site.asgi) in-process for the preview proxy's fast
tests: one HTTP request or one websocket handshake, as a browser would send it, and what the
application answered. Not a test module.

The proxy runs its port streams and service calls in threads: the tests that use this need
committed rows (`django_db(transaction=True)`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.test import Client as DjangoClient

from platform_site.asgi import application

HOST = "testserver"


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: str) -> str | None:
        wanted = name.lower().encode()
        return next((v.decode("latin-1") for k, v in self.headers if k == wanted), None)

    def all(self, name: str) -> list[str]:
        wanted = name.lower().encode()
        return [v.decode("latin-1") for k, v in self.headers if k == wanted]


@dataclass
class Socket:
    """What a websocket handshake came to: accepted (and the first message the app sent
    through), or closed before accepting."""

    accepted: bool
    messages: list[str] = field(default_factory=list)
    close_code: int | None = None


def _scope(kind: str, path: str, host: str, headers: dict[str, str], **extra: Any) -> dict:
    raw = [(b"host", host.encode())]
    raw += [(k.lower().encode(), v.encode("latin-1")) for k, v in headers.items()]
    path, _, query = path.partition("?")
    return {
        "type": kind,
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": raw,
        "client": ("127.0.0.1", 50000),
        "server": (HOST, 80),
        **extra,
    }


def request(
    path: str,
    *,
    host: str = HOST,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    scheme: str = "http",
) -> Answer:
    """One HTTP request through the application; the browser stays until the answer ends.
    An exception out of the application is what uvicorn makes of it: a 500 and a traceback
    in the log."""
    scope = _scope("http", path, host, headers or {}, method=method, scheme=scheme)
    sent: list[dict[str, Any]] = []

    async def conversation() -> None:
        delivered = False

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        try:
            await application(scope, receive, send)
        except Exception as exc:  # as uvicorn answers it (run_asgi in its h11_impl)
            logging.getLogger("uvicorn.error").error("Exception in ASGI application", exc_info=exc)
            if not sent:
                sent.append({"type": "http.response.start", "status": 500, "headers": []})

    asyncio.run(conversation())
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(start["status"], list(start["headers"]), body)


def websocket(
    path: str,
    *,
    host: str = HOST,
    headers: dict[str, str] | None = None,
    scheme: str = "ws",
    say: str | None = None,
    timeout: float = 10.0,
) -> Socket:
    """A websocket handshake through the application; when accepted, waits for the app's
    first message (and the answer to `say`, when given), then leaves."""
    scope = _scope("websocket", path, host, headers or {}, scheme=scheme, subprotocols=[])
    result = Socket(accepted=False)

    async def conversation() -> None:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        inbox.put_nowait({"type": "websocket.connect"})
        wanted = 2 if say is not None else 1
        heard = asyncio.Event()

        async def receive() -> dict[str, Any]:
            return await inbox.get()

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "websocket.accept":
                result.accepted = True
            elif message["type"] == "websocket.close":
                result.close_code = message.get("code", 1000)
                heard.set()
            elif message["type"] == "websocket.send":
                result.messages.append(message.get("text") or "")
                if len(result.messages) == 1 and say is not None:
                    inbox.put_nowait({"type": "websocket.receive", "text": say})
                if len(result.messages) >= wanted:
                    heard.set()

        served = asyncio.ensure_future(application(scope, receive, send))
        await asyncio.wait_for(heard.wait(), timeout)
        inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})
        await asyncio.wait_for(served, timeout)

    asyncio.run(conversation())
    return result


def session_cookie(user: Any) -> str:
    client = DjangoClient()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
