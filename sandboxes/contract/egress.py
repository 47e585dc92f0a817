"""Egress as get_sandbox shows it (issue 27): the sandbox's mode, its allow-list and the
destinations the proxy refused it most. Kept apart from results.py, which embeds it in
SandboxInfo; the egress services' own results are in egress_results.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RefusalInfo(BaseModel):
    """Connections to one destination the proxy refused, for one reason, counted."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    destination: str = Field(description='"name:port" or "address:port"')
    reason: str
    count: int
    first_at: datetime
    last_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


class EgressBlock(BaseModel):
    """A sandbox's egress: its mode, the rules it may reach, what was refused most."""

    model_config = ConfigDict(frozen=True)

    mode: str = Field(description="off, allowlist or public")
    allow: list[str] = Field(description="allowlist mode: the names (and ports) it may reach")
    refused: list[RefusalInfo] = Field(description="the most refused destinations, top 20")

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


__all__ = ["EgressBlock", "RefusalInfo"]
