"""The results of the egress services (sandboxes/services/egress*.py): a team's egress
policy, its secrets (never their values), and a sandbox's network log."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import Field

from sandboxes.contract.egress import RefusalInfo
from sandboxes.contract.results import Result

if TYPE_CHECKING:
    from sandboxes.models import EgressSecret


class TeamEgressInfo(Result):
    """What the team's sandboxes may reach."""

    team: str
    allow_network: bool = Field(description="false: every sandbox of the team is off")
    max_mode: str = Field(description="the most a sandbox may ask for: off, allowlist, public")
    allowlist: list[str] = Field(
        description='names allow-list sandboxes may reach: "pypi.org", "*.example.com:443"'
    )
    allowed_ranges: list[str] = Field(description="private ranges allowed anyway (admin only)")
    modes: list[str] = Field(description="the modes a new sandbox of the team may have")


class SecretInfo(Result):
    """A stored secret, without its value (never shown again after saving)."""

    id: int
    name: str = Field(description="the environment variable holding its placeholder")
    hosts: list[str] = Field(description="the destinations the proxy sends it to")
    header: str
    template: str = Field(description='how the header is made, e.g. "Bearer {value}"')
    team_wide: bool = Field(description="every sandbox of the team; false: its owner's only")
    owner: str | None = Field(description="whose own secret it is (null: team-wide)")
    placeholder: str = Field(description="what sandboxes see in the variable instead")
    created_by: str | None
    created_at: datetime

    @classmethod
    def from_model(cls, secret: EgressSecret) -> SecretInfo:
        return cls.read(
            secret,
            team_wide=secret.user_id is None,
            owner=secret.user.get_username() if secret.user else None,
            created_by=secret.created_by.get_username() if secret.created_by else None,
        )


class NetworkLogInfo(Result):
    """A sandbox's egress and the connections the proxy refused it, most refused first."""

    sandbox_id: str
    mode: str
    allow: list[str]
    refused: list[RefusalInfo]


__all__ = ["NetworkLogInfo", "SecretInfo", "TeamEgressInfo"]
