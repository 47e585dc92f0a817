"""Django's connection hygiene for service calls that ASGI interfaces (the preview proxy, the
terminal websocket) make from worker threads: these threads serve no Django request, so
nothing else would close their connections (with PostgreSQL and DB_CONN_MAX_AGE 0 one would
stay open per thread, and the test database could not even be dropped at the end)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from django.db import close_old_connections


def with_fresh_connection(fn: Any, *args: Any, **kwargs: Any) -> Any:
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    finally:
        close_old_connections()


async def in_db_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in a worker thread, its database connection closed as Django's
    request cycle would close it."""
    return await asyncio.to_thread(functools.partial(with_fresh_connection, fn, *args, **kwargs))
