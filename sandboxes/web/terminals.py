"""The browser's terminals: the "Terminals" section of the sandbox page (loaded into it by
htmx: its open terminals, "Open terminal" for members and up), opening one, its page (xterm.js
in static/web/terminal.js, over the websocket of sandboxes/terminal_ws/) and closing it.

Every view calls services only; another team's sandbox or terminal is not found (404), and a
viewer is refused (403) there.
"""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.web.common import refused
from sandboxes.web.principal import identity_for, principal_for, team_required

DEFAULT_COLS, DEFAULT_ROWS = 80, 24


def terminal_policy(nonce: str) -> str:
    """The terminal page's Content-Security-Policy: the site's (platform_site/csp.py), but
    xterm.js's own <style> elements are let in by a nonce (terminal.js gives them it), and
    the style attributes it sets on the rows it draws are allowed (no script can come of
    either: scripts stay 'self' only)."""
    return "; ".join(
        [
            "default-src 'self'",
            "script-src 'self'",
            f"style-src 'self' 'nonce-{nonce}'",
            "style-src-attr 'unsafe-inline'",
            "connect-src 'self'",
            "img-src 'self' data:",
            "object-src 'none'",
            "base-uri 'self'",
            "frame-ancestors 'none'",
            "form-action 'self'",
        ]
    )


@team_required
@require_GET
def section(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    """The sandbox page's "Terminals" section, with its list (htmx swaps it in)."""
    try:
        found = services.list_terminals(principal_for(request), sandbox_id)
    except ServiceError as exc:
        return refused(request, exc)
    context = {
        "sandbox_id": sandbox_id,
        "terminals": found,
        "terminals_loaded": True,
        "web": identity_for(request),
    }
    return render(request, "web/sandbox/_terminals.html", context)


@team_required
@require_POST
def open_new(request: HttpRequest, sandbox_id: str) -> HttpResponse:
    try:
        opened = services.open_terminal(
            principal_for(request), sandbox_id, cols=DEFAULT_COLS, rows=DEFAULT_ROWS
        )
    except ServiceError as exc:
        if exc.http_status == 409:  # the cap: say so on the sandbox page
            messages.error(request, exc.message)
            return redirect("web:sandbox", sandbox_id)
        return refused(request, exc)
    return redirect("web:terminal", sandbox_id, opened.id)


@team_required
@require_GET
def page(request: HttpRequest, sandbox_id: str, terminal_id: str) -> HttpResponse:
    try:
        terminal = services.get_terminal(principal_for(request), sandbox_id, terminal_id)
    except ServiceError as exc:
        return refused(request, exc)
    nonce = secrets.token_urlsafe(18)
    context = {
        "terminal": terminal,
        "sandbox_id": sandbox_id,
        "socket_path": f"/ws/sandboxes/{sandbox_id}/terminals/{terminal_id}/",
        "style_nonce": nonce,
    }
    response = render(request, "web/sandbox/terminal.html", context)
    response["Content-Security-Policy"] = terminal_policy(nonce)
    return response


@team_required
@require_POST
def close(request: HttpRequest, sandbox_id: str, terminal_id: str) -> HttpResponse:
    try:
        services.close_terminal(principal_for(request), sandbox_id, terminal_id)
    except ServiceError as exc:
        return refused(request, exc)
    messages.success(request, "Terminal closed.")
    return redirect("web:sandbox", sandbox_id)
