"""The platform's logging configuration (settings.LOGGING), as text or one JSON object a line.

SANDHUB_LOG_FORMAT=json makes every line the web process (Django, uvicorn's own and access
lines, the MCP server), the worker (django-q2) and the egress proxy write one JSON object:
time (UTC, ISO 8601), level, logger, message, process (its pid), an exception's traceback
when there is one, and the fields bound to the current context (mcp_bridge/logcontext.py):
the MCP session of the request being served, where it has one. Text (the default)
is Python's plain format, as before.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from mcp_bridge import logcontext

LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        line.update(logcontext.bound())
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def logging_config(log_format: str, level: str, mcp_level: str) -> dict[str, Any]:
    """settings.LOGGING for `log_format` (one of LOG_FORMATS)."""
    console: dict[str, Any] = {"class": "logging.StreamHandler"}
    loggers: dict[str, Any] = {
        # The MCP SDK logs every stateless request's set-up and tear-down at INFO: a line
        # (and a few hundred microseconds of the event loop) per tool call, saying nothing.
        "mcp": {"level": mcp_level},
    }
    formatters: dict[str, Any] = {}
    if log_format == "json":
        formatters["json"] = {"()": JsonFormatter}
        console["formatter"] = "json"
        # uvicorn gave its loggers handlers of its own before Django was set up: theirs go
        # to the JSON handler too (this runs again in each web worker, after uvicorn's).
        for name in ("uvicorn", "uvicorn.access"):
            loggers[name] = {"handlers": ["console"], "level": "INFO", "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": formatters,
        "handlers": {"console": console},
        "root": {"handlers": ["console"], "level": level},
        "loggers": loggers,
    }
