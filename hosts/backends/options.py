"""The keyword arguments of exec and start_background (base.py documents them), as types for
the implementations that take them as a whole and pass them on: the choice between agent and
per-command path (agentfirst.py), the agent link and jobs, the per-command path."""

from __future__ import annotations

from typing import Required, TypedDict

from hosts.backends.base import OutputCallback
from hosts.backends.stdin import StdinPipe

__all__ = ["CommandOptions", "JobOptions"]


class CommandOptions(TypedDict, total=False):
    cwd: Required[str]
    env: Required[dict[str, str]]
    timeout: Required[float]
    output_cap: Required[int]
    on_output: OutputCallback | None
    stdin: bytes | StdinPipe | None
    marker: str | None


class JobOptions(TypedDict, total=False):
    cwd: Required[str]
    env: Required[dict[str, str]]
    job_id: Required[str]
    timeout: float | None
