"""The MCP server's tests. Every test here that uses the live server's world (`world`,
tests/conftest.py) reaches the real Docker engine through the services, so it is marked
`docker` (`make test-fast` leaves it out); the others need no engine."""

from __future__ import annotations

import pytest

from tests.markers import mark_folder


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "docker", using={"world"})
