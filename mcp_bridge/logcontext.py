"""Fields that every log line of the current context carries in the JSON log format
(platform_site/logformat.py): the MCP session of the request being served, bound by
sessions.McpSessions. A context variable: each request is a task of its own, and the tasks
it starts (a tool's worker threads) copy its context, so the fields follow the request and
no further. Imports nothing of Django: settings.py loads it with the logging configuration.
"""

from __future__ import annotations

from contextvars import ContextVar

_fields: ContextVar[dict[str, str] | None] = ContextVar("sandhub_log_fields", default=None)


def bind(**fields: str) -> None:
    """Add fields to the log lines of the current context."""
    _fields.set({**(_fields.get() or {}), **fields})


def bound() -> dict[str, str]:
    return _fields.get() or {}
