"""GET /metrics for Prometheus, behind a bearer token (SANDHUB_METRICS_TOKEN).

Served by the ASGI app itself (platform_site/asgi.py), not through Django's middleware and
URL resolver: a scrape every 15 s from every Prometheus costs its few queries and nothing
of a page's. No token configured: the endpoint is off and the address is an unknown one
(Django's own 404, as for any other). A team's session or API key is no credential here:
only the operator's token, compared in constant time. Failures count towards the same
per-address lockout as bad API keys (tenants/ratelimits.py), one audit row each.
"""

from __future__ import annotations

import hmac

from django.conf import settings

from platform_site.metrics.exposition import scrape
from platform_site.metrics.requests import Receive, Scope, Send
from sandboxes.http.dbthreads import in_db_thread
from tenants import ratelimits
from tenants.models import Channel

FAILURE_REASON = "bad metrics token"


def enabled() -> bool:
    return bool(settings.SANDHUB_METRICS_TOKEN)


async def serve_metrics(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["method"] not in ("GET", "HEAD"):
        await _answer(send, 405, b"GET only\n", [(b"allow", b"GET, HEAD")])
        return
    address = (scope.get("client") or ("",))[0] or None
    try:
        await in_db_thread(ratelimits.check_lockout, None, address)
        if not _token_matches(scope):
            await in_db_thread(_failed, address)
            await _answer(
                send, 401, b"unauthorized\n", [(b"www-authenticate", b'Bearer realm="metrics"')]
            )
            return
    except ratelimits.RateLimited as exc:
        retry = str(max(int(exc.retry_after), 1)).encode()
        await _answer(send, 429, b"too many failed attempts\n", [(b"retry-after", retry)])
        return
    body, content_type = await in_db_thread(scrape, _header(scope, b"accept").decode("latin-1"))
    headers = [(b"content-type", content_type.encode()), (b"cache-control", b"no-store")]
    await _answer(send, 200, b"" if scope["method"] == "HEAD" else body, headers)


def _header(scope: Scope, wanted: bytes) -> bytes:
    for name, value in scope.get("headers", []):
        if name.lower() == wanted:
            return value
    return b""


def _token_matches(scope: Scope) -> bool:
    expected = settings.SANDHUB_METRICS_TOKEN.encode()
    scheme, _, credential = _header(scope, b"authorization").partition(b" ")
    given = credential.strip() if scheme.lower() == b"bearer" else b""
    # Constant time whatever the token given (a missing one is compared too).
    return hmac.compare_digest(given, expected) and bool(given)


def _failed(address: str | None) -> None:
    ratelimits.authentication_failed(
        ratelimits.Failure(reason=FAILURE_REASON, prefix=None, address=address, channel=Channel.API)
    )


async def _answer(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    if not any(name == b"content-type" for name, _ in headers):
        headers = [*headers, (b"content-type", b"text/plain; charset=utf-8")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
