"""Fixtures of the previews' service tests (test_services.py, test_deploy.py): a fake
sandbox whose ports are real loopback servers. The interfaces, Docker and SSH tests bring
their own sandboxes (the live server's world, tests/conftest.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from django.core.cache import cache

from sandboxes import services
from tests.fakes import FakeBackend
from tests.previews.helpers import PageApp


@pytest.fixture
def app_port() -> Iterator[int]:
    """A real HTTP server on loopback: what the sandbox's app answers."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), PageApp)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def fresh(monkeypatch) -> None:
    """Empty port maps and a cache that remembers no earlier test's audits."""
    monkeypatch.setattr(FakeBackend, "ports", {})
    monkeypatch.setattr(FakeBackend, "apps", {})
    cache.clear()


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    return services.create_sandbox(as_alice, name="web").id


@pytest.fixture
def listening(app_port) -> int:
    """Port 8000 of every fake sandbox answers (an app started some other way)."""
    FakeBackend.ports[8000] = app_port
    return 8000
