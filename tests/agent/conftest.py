"""The sandbox agent without a host: run by this machine's python3 over pipes. No engine, no
sshd, no database: every test here is in the fast tier (`make test-fast`). The agent in
Docker sandboxes is tested in tests/docker/, over SSH in tests/ssh/."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hosts.backends.agent.client import AgentClient
from hosts.backends.agent.transports import PipeTransport


@pytest.fixture
def agent() -> Iterator[AgentClient]:
    """The agent as a local process over pipes (hosts.backends.agent.transports)."""
    client = AgentClient(PipeTransport(), label="local")
    yield client
    client.close()
