"""A REST download releases the backend's stream as soon as the response is done with it:
read to the end, cut short by the client, or closed before a byte was sent."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
from rest_framework.test import APIClient, APIRequestFactory

from sandboxes import services
from sandboxes.api.files import DownloadView
from sandboxes.http.streaming import DownloadStream as ChunkStream
from tenants import apikeys
from tests.fakes import FakeBackend


class Source(Iterator[bytes]):
    """A backend stream that records whether it was closed (and never runs while closed)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.closed, self.read_after_close = chunks, False, False

    def __next__(self) -> bytes:
        if self.closed:
            self.read_after_close = True
            raise StopIteration
        return next(self.chunks)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def opened(fake_backend, monkeypatch) -> list[Source]:
    """Every stream the backend opens for a download."""
    streams: list[Source] = []
    get_files = FakeBackend.get_files

    def tracked(self, state, path):
        streams.append(Source(get_files(self, state, path)))
        return streams[-1]

    monkeypatch.setattr(FakeBackend, "get_files", tracked)
    return streams


def close_like_a_server(response) -> None:
    """What a WSGI server does when the client goes away: close the response (without the
    request_finished handler, which would close the test's database connection)."""
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)


@pytest.mark.django_db
def test_a_download_cut_short_closes_the_backend_stream(opened, as_alice, alice, team_a):
    sandbox = services.create_sandbox(as_alice)
    services.write_file(as_alice, sandbox.id, "big.bin", b"x" * 300_000)
    auth = f"Bearer {apikeys.create_key(alice, team_a).plaintext}"
    url = f"/api/v1/sandboxes/{sandbox.id}/files/download"

    # The view's own response, as a server gets it (the test client wraps it in its own).
    request = APIRequestFactory().get(url, {"path": "big.bin"}, HTTP_AUTHORIZATION=auth)
    response = DownloadView.as_view()(request, sandbox_id=sandbox.id)
    assert response.status_code == 200
    first = next(iter(response))
    assert first == b"x" * len(first) and len(opened) == 1 and not opened[0].closed
    close_like_a_server(response)
    assert opened[0].closed

    # Closed before a byte was sent: released all the same.
    unread = DownloadView.as_view()(request, sandbox_id=sandbox.id)
    close_like_a_server(unread)
    assert opened[1].closed

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=auth)
    whole = client.get(url, {"path": "big.bin"})
    assert b"".join(whole.streaming_content) == b"x" * 300_000
    assert opened[2].closed


def test_an_asgi_client_leaving_mid_stream_closes_the_source():
    source = Source(iter([b"a", b"b", b"c"]))
    response = ChunkStream(source)

    async def read_one_then_leave() -> bytes:
        stream = response.__aiter__()
        part = await stream.__anext__()
        await stream.aclose()  # Django's ASGI handler, when the client disconnects
        return part

    assert asyncio.run(read_one_then_leave()) == b"a"
    assert source.closed


def test_a_read_in_flight_ends_before_the_source_is_closed():
    """Cancelled while a chunk is being read in a worker thread: the read is let finish,
    then the source is closed (a generator cannot be closed while it runs)."""
    reading, release = threading.Event(), threading.Event()

    def slow() -> Iterator[bytes]:
        yield b"first"
        reading.set()
        release.wait(5)
        yield b"second"

    source = Source(slow())
    response = ChunkStream(source)

    async def leave_during_a_read() -> None:
        async def consume() -> None:
            async for _ in response:
                pass

        task = asyncio.ensure_future(consume())
        await asyncio.to_thread(reading.wait, 5)
        task.cancel()
        await asyncio.sleep(0.1)
        assert not source.closed  # the read still runs
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(leave_during_a_read())
    assert source.closed and not source.read_after_close
