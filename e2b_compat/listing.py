"""E2B's list of sandboxes: its filters (metadata, state, template, startedAfter), its order
and its pages (limit, and X-Next-Token: an opaque position, the next call's nextToken)."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from e2b_compat.shapes import state_of
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.results import SandboxInfo

__all__ = ["matching", "page"]

MAX_LIMIT = 1000


def matching(infos: list[SandboxInfo], query: Mapping[str, str], *, v1: bool) -> list[SandboxInfo]:
    """The sandboxes the query asks for, in its order (newest first unless order=asc); v1's
    list shows running ones by default."""
    states = _states(query.get("state"), default="running" if v1 else "")
    labels = _metadata(query.get("metadata"))
    template = query.get("template")
    after = _time(query.get("startedAfter"))
    found = [
        info
        for info in infos
        if (not states or state_of(info) in states)
        and all(info.metadata.get(key) == value for key, value in labels.items())
        and (not template or info.image == template)
        and (after is None or (info.started_at or info.created_at) > after)
    ]
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidInput("order is asc or desc")
    found.sort(key=lambda info: (info.started_at or info.created_at, info.id))
    return found if order == "asc" else found[::-1]


def page(
    rows: list[dict[str, Any]], query: Mapping[str, str]
) -> tuple[list[dict[str, Any]], str | None]:
    """(this page's rows, the next page's token or None)."""
    limit_text = query.get("limit")
    if limit_text is None:
        limit = MAX_LIMIT
    elif not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_LIMIT}")
    else:
        limit = int(limit_text)
    start = _position(query.get("nextToken"))
    end = start + limit
    token = base64.urlsafe_b64encode(str(end).encode()).decode() if end < len(rows) else None
    return rows[start:end], token


def _position(token: str | None) -> int:
    if not token:
        return 0
    try:
        return max(0, int(base64.urlsafe_b64decode(token.encode()).decode()))
    except ValueError as exc:
        raise InvalidInput("nextToken is not one this list gave") from exc


def _states(text: str | None, default: str) -> set[str]:
    wanted = {s.strip() for s in (text or default).split(",") if s.strip()}
    unknown = wanted - {"running", "paused"}
    if unknown:
        raise InvalidInput(f"unknown state(s) {sorted(unknown)}: running or paused")
    return wanted


def _metadata(text: str | None) -> dict[str, str]:
    """E2B's metadata filter: key=value pairs, URL-encoded (keys and values quoted again)."""
    if not text:
        return {}
    pairs = urllib.parse.parse_qsl(text, keep_blank_values=True)
    return {urllib.parse.unquote(key): urllib.parse.unquote(value) for key, value in pairs}


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidInput(f"startedAfter is not an ISO 8601 time: {text[:40]!r}") from exc
