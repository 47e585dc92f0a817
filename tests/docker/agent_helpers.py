"""Helpers of the tests of the sandbox agent in Docker sandboxes (test_agent.py,
test_agent_oom.py): a command through the agent, and a look from outside it. Not a test
module."""

from __future__ import annotations

from typing import Any

import docker

from hosts.backends.agent.link import AgentLink
from hosts.backends.base import ExecResult
from hosts.backends.docker.names import SANDBOX_USER, container_ref
from tests.memory import MIB


def run(link: AgentLink, state: dict[str, Any], script: str, **options: Any) -> ExecResult:
    options.setdefault("timeout", 30)
    options.setdefault("output_cap", MIB)
    return link.exec(state, ["bash", "-c", script], cwd="/workspace", env={}, **options)


def outside(engine: docker.DockerClient, state: dict[str, Any], script: str) -> str:
    """A script run by a plain engine exec as the sandbox user, not through the agent."""
    container = engine.containers.get(container_ref(state))
    code, output = container.exec_run(["sh", "-c", script], user=SANDBOX_USER)
    return output.decode("utf-8", "replace")


def marked(engine: docker.DockerClient, state: dict[str, Any], marker: str) -> str:
    return outside(
        engine, state, f"grep -lzx SANDHUB_EXEC_ID={marker} /proc/[0-9]*/environ 2>/dev/null"
    ).strip()
