"""SandboxPlace: where a kind's sandbox lives, as the code that runs in it sees it.

Both ways of running things in a sandbox, the agent (agent/link.py) and the per-command path
where the agent cannot run (fallback/), ask the kind the same few questions: how a sandbox
path looks from inside (Docker: as it is; SSH: under the sandbox's directory on the host),
where background jobs keep their files, the environment a call gets, and whether a sandbox
whose path went missing is gone as a whole.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["SandboxPlace"]


class SandboxPlace(Protocol):
    def key(self, state: dict[str, Any]) -> str | None:
        """The sandbox's key in this process (its container, its directory); None when the
        state names no running sandbox (a lone volume that reconciliation removes)."""
        ...

    def host_path(self, state: dict[str, Any], path: str) -> str:
        """A sandbox path (/workspace/...) as the sandbox's processes see it."""
        ...

    def sandbox_path(self, state: dict[str, Any], path: str) -> str:
        """The other way: a path the sandbox reported, in the sandbox's terms."""
        ...

    def environment(self, state: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
        """A call's whole environment as the agent should set it."""
        ...

    def write_root(self, state: dict[str, Any]) -> str:
        """Where writes must stay, as the sandbox sees it."""
        ...

    def job_dir(self, state: dict[str, Any], job_id: str) -> str:
        """Where a background job keeps its files, as the sandbox sees it."""
        ...

    def after_missing(self, state: dict[str, Any]) -> None:
        """A path or working directory was missing: SandboxGone if the whole sandbox is."""
        ...
