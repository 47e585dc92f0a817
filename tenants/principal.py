"""Who is acting: user + team + channel, passed first to every service function."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tenants.models import Channel, Membership, Team


@dataclass(frozen=True)
class Principal:
    user: Any  # django.contrib.auth user, or None for the system
    team: Team | None
    channel: str = Channel.WEB
    source_address: str | None = None
    # Scopes granted by the credential used (an API key); None means the user's full role.
    scopes: frozenset[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # The user's role in the team when it was read together with the credential in the same
    # request (an API key's check reads it in the same query); None: read on use.
    role: str | None = None

    @classmethod
    def system(cls, team: Team | None = None) -> Principal:
        return cls(user=None, team=team, channel=Channel.SYSTEM)

    @property
    def is_system(self) -> bool:
        return self.channel == Channel.SYSTEM and self.user is None

    @property
    def is_platform_admin(self) -> bool:
        """The system itself, or an active staff user acting through Django admin.

        Staff rights count only on the admin channel: the same person using an API key or the
        web pages acts as an ordinary member of his team.
        """
        if self.is_system:
            return True
        user = self.user
        return self.channel == Channel.ADMIN and bool(user and user.is_active and user.is_staff)

    def membership(self) -> Membership | None:
        """Read fresh on every call, so a lowered role or removed membership applies at once."""
        if self.user is None or self.team is None:
            return None
        found = Membership.objects.filter(user=self.user, team=self.team).order_by()[:1]
        return next(iter(found), None)  # unique: no ordering (.first() would compile one)
