"""Helpers of the web pages' tests (fixtures: tests/web/conftest.py): a field's errors on a
page, a streamed response's body, a fake sandbox's files, and a call off playwright's event
loop. Not a test module."""

from __future__ import annotations

import concurrent.futures
import html as html_module
import re
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connections

from sandboxes.models import Sandbox
from tests.fakes import FakeBackend


def field_errors(html: str, field: str) -> list[str]:
    """The error messages shown beside `field` (templates/web/_field.html)."""
    # From the field's wrapper to the next field or the form's end (widgets nest divs).
    block = re.search(
        rf'<div class="field[^"]*" id="field-{re.escape(field)}">(.*?)(?:id="field-|</form>)',
        html,
        re.S,
    )
    assert block, f"no field {field} on the page"
    found = re.findall(r'<small class="error"[^>]*>(.*?)</small>', block.group(1), re.S)
    return [html_module.unescape(e) for e in found]


def read_stream(response: Any) -> bytes:
    """A streamed response's whole body, whether its content is a sync or an async iterator."""
    if not getattr(response, "streaming", False):
        return response.content
    if response.is_async:

        async def gather() -> bytes:
            return b"".join([part async for part in response.streaming_content])

        return async_to_sync(gather)()
    return b"".join(response.streaming_content)


def files_of(sandbox_id: str) -> dict[str, bytes]:
    """The fake backend's files of a sandbox."""
    state = Sandbox.objects.get(public_id=sandbox_id).backend_state
    return dict(FakeBackend.sandboxes[state["container_id"]]["files"])


def off_loop(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args) in a thread of its own. Playwright's sync API keeps an event loop running in
    the test's thread, where Django refuses ORM calls and asyncio.run refuses to start; the
    thread's database connection is closed after (PostgreSQL could not drop the database)."""

    def closing() -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(closing).result()
