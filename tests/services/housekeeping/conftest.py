"""Fixtures of the housekeeping tests: sweep, host probes, reconciliation, their schedules,
and the warm pool (sandboxes/housekeeping/, schedules.py, tasks.py). Each test runs as this
run's own Sandhub instance (helpers.py), so reconciliation never touches containers of other
deployments or test runs on the same engine."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from tests.engine import engine_cleaning_up
from tests.fakes import FakeBackend
from tests.services.housekeeping.helpers import INSTANCE


@pytest.fixture(autouse=True)
def own_instance(settings):
    settings.SANDHUB_INSTANCE = INSTANCE
    FakeBackend.down_hosts = set()
    FakeBackend.fail_claim = None
    yield
    FakeBackend.down_hosts = set()


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    with engine_cleaning_up(INSTANCE) as client:
        yield client
