"""Fixtures of the tests over several Docker engines: a second dockerd on TCP with TLS
(tests/cluster/dockerd2.py), started once per module. Every test in this folder that uses it
is marked `docker`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.dockerd2 import SecondEngine, unavailable_reason
from tests.markers import mark_folder


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "docker", using={"second_engine"})


@pytest.fixture(scope="module")
def second_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecondEngine]:
    """A second dockerd on tcp://127.0.0.1:PORT with --tlsverify, the sandbox image loaded;
    stopped after the module with nothing of it left (containers, mounts, processes)."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    engine = SecondEngine.start(tmp_path_factory.mktemp("dockerd2"))
    yield engine
    engine.stop()
