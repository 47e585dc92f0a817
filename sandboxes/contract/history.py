"""The results of a sandbox's history read whatever its state (sandboxes/services/history.py):
a deleted sandbox keeps its command history, which its team may read."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import Field

from sandboxes.contract.results import CommandResult, Result, SandboxInfo

if TYPE_CHECKING:
    from sandboxes.models import Sandbox


class DeletedSandboxInfo(SandboxInfo):
    """A deleted sandbox of the team, as the list of deleted sandboxes shows it."""

    deleted_at: datetime | None = Field(description="when it was deleted")

    @classmethod
    def of_deleted(cls, sandbox: Sandbox) -> DeletedSandboxInfo:
        return cls(**SandboxInfo.from_model(sandbox).model_dump(), deleted_at=sandbox.deleted_at)


class SandboxHistory(Result):
    """A sandbox (running, paused, stopped or deleted) and its newest commands."""

    sandbox: SandboxInfo
    deleted: bool = Field(description="the sandbox is deleted: its history is all that is left")
    commands: list[CommandResult] = Field(description="newest first")
