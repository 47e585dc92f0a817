"""The results of pause, resume and stop (sandboxes/services/lifecycle.py), and the list a
file listing or download returns, which says like any other result of a call on a sandbox
whether that call had to resume it first."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import Field

from sandboxes.contract.results import RESUMED_SECONDS, Result, SandboxInfo

T = TypeVar("T")


class LifecycleChange(Result):
    """A sandbox after a pause, resume or stop, and what that did."""

    sandbox: SandboxInfo
    previous_status: str = Field(description="its status before this call")
    changed: bool = Field(description="false: it was in that state already, nothing was done")
    seconds: float | None = Field(
        description="how long its host took (freeze, thaw, stop or start); null when "
        "nothing was done"
    )
    background_ended: list[int] = Field(
        default_factory=list,
        description="background commands this ended: a stop ends them all (cancelled), a "
        "resume kills those whose max_runtime_seconds passed while paused (timed_out)",
    )


class ResumedList(list[T], Generic[T]):
    """A list result (a listing, a download's files) that also says how long the call
    waited for its sandbox to resume (None: it was running)."""

    resumed_seconds: float | None = None

    def __init__(self, items: list[T] | None = None, resumed_seconds: float | None = None):
        super().__init__(items or [])
        self.resumed_seconds = resumed_seconds


__all__ = ["RESUMED_SECONDS", "LifecycleChange", "ResumedList"]
