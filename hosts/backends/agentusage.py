"""sample_usage for AgentFirstBackend (mixed into it): the sandbox's cgroup and workspace.

Through the agent's `usage` op where this process has the sandbox's agent running already (a
sample costs one request on a stream that is open), else by one exec of
usagescripts.USAGE_SCRIPT (cat of the same files); an agent is never started only to sample.
Where the inside cannot see its own cgroup, the kind reads it from the host side: an
isolated SSH sandbox (a cgroup namespace over the host's /sys) entirely, disk included, in one
round trip (`usage_outside`); elsewhere the cgroup alone when the answer's `visible` says the
inside could not (`usage_from_host`: Docker asks the engine). A sandbox without a cgroup of
its own (an SSH sandbox that is not isolated shares its login user's) answers None for CPU,
memory and pids (`has_own_cgroup`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypeVar

from hosts.backends.agent.calls import Call
from hosts.backends.agent.client import AgentClient, AgentUnavailable
from hosts.backends.types import UsageSample
from hosts.backends.usagescripts import DU_SECONDS, USAGE_SCRIPT, parse_usage

if TYPE_CHECKING:
    from hosts.backends.agent.link import AgentLink
    from hosts.backends.fallback.commands import PlainCommands

__all__ = ["AgentUsage", "usage_call", "to_sample"]

T = TypeVar("T")

USAGE_TIMEOUT = 10.0  # one sample: the walk is bounded at 1 s, du at DU_SECONDS
CGROUP_KEYS = ("cpu_usec", "cpu_limit", "memory", "memory_limit", "pids", "pids_limit")
WORKSPACE = "/workspace"


def usage_call(client: AgentClient, workspace: str, timeout: float = USAGE_TIMEOUT) -> dict:
    """The agent's `usage` op (protocol.py)."""
    call = client._call(
        {"op": "usage", "workspace": workspace}, lambda rid: Call(client, rid), timeout
    )
    return dict(call.body)


def to_sample(answer: dict[str, Any]) -> UsageSample:
    def number(key: str) -> int | None:
        value = answer.get(key)
        return int(value) if isinstance(value, int | float) else None

    usec = number("cpu_usec")
    limit = answer.get("cpu_limit")
    return UsageSample(
        at=float(answer.get("at") or time.time()),
        cpu_seconds=usec / 1e6 if usec is not None else None,
        cpu_limit=float(limit) if isinstance(limit, int | float) else None,
        memory_bytes=number("memory"),
        memory_limit_bytes=number("memory_limit"),
        disk_used_bytes=number("disk_used"),
        disk_limit_bytes=number("disk_limit"),
        pids=number("pids"),
        pids_limit=number("pids_limit"),
    )


class AgentUsage:
    """The mixin: needs the AgentFirstBackend's agents, plain path and agent_on."""

    agents: AgentLink
    plain: PlainCommands

    def agent_on(self) -> bool:  # AgentFirstBackend's
        raise NotImplementedError

    def sample_usage(self, state: dict[str, Any]) -> UsageSample:
        answer = self.usage_outside(state)
        if answer is not None:
            answer.setdefault("at", time.time())
            return to_sample(answer)
        workspace = self.agents.place.host_path(state, WORKSPACE)
        # Through an agent only if one runs already (as a one-off command, `once`): one
        # started for sampling would be a python3 process in the sandbox for good, counted in
        # the very memory it reports, in every process that samples (the task's workers).
        if self.agent_on() and self.agents.running(state):
            try:
                answer = self.agents.idempotent(state, lambda c: usage_call(c, workspace))
            except AgentUnavailable:
                answer = None
        if answer is None:
            answer = self.usage_by_exec(state, workspace)
        if not self.has_own_cgroup(state):
            # Its processes are in a cgroup they share (an SSH login user's): what that holds
            # is not the sandbox's, and it may be other sandboxes'.
            answer.update(dict.fromkeys(CGROUP_KEYS))
        elif not answer.get("visible"):
            outside = self.usage_from_host(state)
            answer.update({key: outside.get(key) for key in CGROUP_KEYS if key in outside})
        answer.setdefault("at", time.time())
        return to_sample(answer)

    def usage_by_exec(self, state: dict[str, Any], workspace: str) -> dict[str, Any]:
        """The per-command path: one exec of the script in the sandbox."""
        result = self.plain.exec(
            state,
            ["sh", "-c", USAGE_SCRIPT, "sh", workspace, ""],
            cwd=WORKSPACE,
            env={},
            timeout=DU_SECONDS + USAGE_TIMEOUT,
            output_cap=16384,
        )
        answer = parse_usage(result.stdout.decode(errors="replace"))
        answer["at"] = time.time()
        return answer

    def usage_outside(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """The whole answer read from outside the sandbox, where the kind can do that in
        one round trip and the inside could not see its cgroup anyway; None: ask inside."""
        return None

    def has_own_cgroup(self, state: dict[str, Any]) -> bool:
        """Whether the sandbox's processes, and only they, are in a cgroup (a container)."""
        return True

    def usage_from_host(self, state: dict[str, Any]) -> dict[str, Any]:
        """The sandbox's cgroup read from outside it (the agent op's keys), or {} where the
        kind cannot: then CPU, memory and pids are unknown (None)."""
        return {}
