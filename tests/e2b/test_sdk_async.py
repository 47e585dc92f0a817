"""E2B's async SDK (AsyncSandbox): a command with streaming callbacks, and a folder watched
through envd's WatchDir stream (the async SDK's watch_dir follows a stream, not a poller)."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = pytest.mark.docker


def test_async_run_and_watch_stream(e2b_env) -> None:
    from e2b import AsyncSandbox

    async def flow() -> None:
        sandbox = await AsyncSandbox.create(timeout=300)
        try:
            seen: list[str] = []
            result = await sandbox.commands.run("echo one; echo two", on_stdout=seen.append)
            assert result.stdout == "one\ntwo\n" and "".join(seen) == "one\ntwo\n"
            await sandbox.files.make_dir("streamed")
            events: list[tuple[str, str]] = []
            handle = await sandbox.files.watch_dir(
                "streamed", on_event=lambda e: events.append((e.name, e.type.value))
            )
            try:
                await sandbox.files.write("streamed/a.txt", "a")
                for _ in range(100):
                    if ("a.txt", "create") in events:
                        break
                    await asyncio.sleep(0.1)
                assert ("a.txt", "create") in events, events
            finally:
                await handle.stop()
        finally:
            await sandbox.kill()

    asyncio.run(flow())
