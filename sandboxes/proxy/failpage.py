"""The page a browser gets when a preview's app cannot answer (502: nothing listens on the
port, or the app broke off; 504: it went silent): what happened and how to start the app,
instead of a bare status line.

It is served on the preview's origin (in host mode an origin of its own, where the platform's
/static/ is not there to link to), so it is one self-contained response: its one <style> is
allowed by the hash of its exact text in the page's Content-Security-Policy. A hash rather than
a nonce: the style never changes, so there is nothing to make up per response, and nothing
else (no script, no other style, no image) is allowed at all.
"""

from __future__ import annotations

import base64
import hashlib
import html

from sandboxes.proxy.routing import PreviewTarget

STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:42rem;margin:3rem auto;padding:0 1rem;"
    "color:#1f2933;background:#f6f8fa}"
    "main{background:#fff;border:1px solid #d9e0e7;border-radius:8px;padding:1.25rem 1.5rem}"
    "h1{font-size:1.35rem;margin:0 0 .75rem}"
    "code{font-family:ui-monospace,monospace;font-size:.9em;background:#eef1f4;"
    "padding:.1rem .3rem;border-radius:4px;word-break:break-all}"
    ".detail{color:#5b6670;font-size:.9rem}.status{color:#b3261e;font-weight:600}"
    "@media (prefers-color-scheme:dark){body{background:#0f1419;color:#dfe6ee}"
    "main{background:#161c23;border-color:#2b333c}code{background:#232b34}"
    ".detail{color:#9aa5b1}.status{color:#ff8f86}}"
)
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
CSP = (
    f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
).encode()


def _headline(status: int, port: str) -> tuple[str, str]:
    if status == 504:
        return (
            f"The app on port {port} did not answer in time",
            "It accepted the connection but sent nothing back: it may be busy, stuck, or "
            "waiting for something. Look at its output in the sandbox.",
        )
    return (
        f"Nothing answers on port {port}",
        f"This preview is open, but no app answered on port {port} of the sandbox: the app "
        "is not running, has not started yet, listens on another port, or broke off its "
        "answer.",
    )


def page(status: int, message: str, target: PreviewTarget | None) -> bytes:
    """The page for a 502 or 504 of a preview (`message`: the proxy's own words)."""
    port = str(target.port) if target else "this"
    title, explanation = _headline(status, port)
    example = f"python3 -m http.server {target.port}" if target else "python3 -m http.server 8000"
    where = (
        f' (<a href="/sandboxes/{html.escape(target.sandbox_id)}/">the sandbox page</a>)'
        if target and not target.host_mode
        else ""
    )
    return (
        "<!doctype html>\n<html lang=en><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width'>\n"
        f"<title>{html.escape(title)} · Sandhub preview</title>\n"
        f"<style>{STYLE}</style>\n<main>\n"
        f"<p class=status>{status} · Sandhub preview</p>\n"
        f"<h1>{html.escape(title)}</h1>\n<p>{html.escape(explanation)}</p>\n"
        "<p>To start the app, run it in the sandbox as a background job that keeps serving "
        f"in the foreground and listens on port {html.escape(port)}, e.g. "
        f"<code>{html.escape(example)}</code>: “Deploy an app” on the sandbox "
        f"page{where} does that and waits until the port answers; an agent calls "
        "<code>deploy_app</code>. Then reload this page.</p>\n"
        f"<p class=detail>{html.escape(message)}</p>\n</main>\n"
    ).encode()
