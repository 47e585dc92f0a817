"""What the file operations of the files section return (sandboxes/services/file_ops.py):
the path acted on and, for a rename, where it went. Kept apart from results.py."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sandboxes.contract.results import RESUMED_SECONDS, Result


class FileChange(Result):
    """A delete, rename (move) or new folder inside /workspace."""

    sandbox_id: str
    action: Literal["delete", "rename", "mkdir"]
    path: str = Field(description="the path acted on (a rename's source), absolute")
    to: str | None = Field(None, description="a rename's destination, absolute")
    resumed_seconds: float | None = Field(None, description=RESUMED_SECONDS)
