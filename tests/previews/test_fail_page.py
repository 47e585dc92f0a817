"""What a browser gets when a preview's app cannot answer (sandboxes/proxy/failpage.py): a page
saying nothing listens on the port and how to start the app, held to a Content-Security-Policy
that allows its one <style> by hash and nothing else; programs still get the plain line.
Chromium renders it: tests/web/test_browser_pages26.py."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re

import pytest

from sandboxes.proxy import failpage, replies

MESSAGE = "nothing answers on port 8000 in sandbox sb_x: <script>alert(1)</script>"


def answer(status: int, accept: bytes, path: str = "/preview/sb_abc/8000/") -> tuple[dict, bytes]:
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "headers": [(b"host", b"x"), (b"accept", accept)]}
    asyncio.run(replies.refuse(scope, send, status, MESSAGE))
    start, body = sent
    return {k.decode(): v.decode() for k, v in start["headers"]} | {
        "status": start["status"]
    }, body["body"]


@pytest.mark.parametrize("status", [502, 504])
def test_a_browser_gets_a_page_that_explains(status, settings):
    settings.SANDHUB_PREVIEW_DOMAIN = ""
    headers, body = answer(status, b"text/html,application/xhtml+xml,*/*;q=0.8")
    page = body.decode()
    assert headers["status"] == status and headers["content-type"] == "text/html; charset=utf-8"
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    if status == 502:
        assert "<h1>Nothing answers on port 8000</h1>" in page
    else:
        assert "<h1>The app on port 8000 did not answer in time</h1>" in page
    assert "python3 -m http.server 8000" in page and "deploy_app" in page
    assert 'href="/sandboxes/sb_abc/"' in page  # path mode: the platform is this origin
    # The one <style> is allowed by its hash; nothing else is (no script, no inline style=).
    (style,) = re.findall(r"<style>(.*?)</style>", page, re.S)
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    csp = headers["content-security-policy"]
    assert f"style-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    assert "style=" not in page and "<script" not in page
    assert headers["cache-control"] == "no-store" and headers["x-content-type-options"] == "nosniff"


def test_programs_and_other_refusals_keep_the_plain_line(settings):
    settings.SANDHUB_PREVIEW_DOMAIN = ""
    headers, body = answer(502, b"*/*")
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert body == f"{MESSAGE}\n".encode()
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    accept = [(b"accept", b"text/html")]
    scope = {"type": "http", "path": "/preview/sb_abc/8000/", "headers": accept}
    asyncio.run(replies.refuse(scope, send, 404, "not found"))
    assert sent[1]["body"] == b"not found\n"  # a refusal says no more than before


def test_the_hash_in_the_policy_is_the_styles():
    digest = base64.b64encode(hashlib.sha256(failpage.STYLE.encode()).digest()).decode()
    assert f"'sha256-{digest}'".encode() in failpage.CSP
