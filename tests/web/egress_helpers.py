"""Helpers of the egress pages' and API's tests: a team that allows network, a refusal the
proxy would have counted, a secret value to look for. Not a test module."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from sandboxes.models import EgressRefusal, Sandbox
from tenants.models import Team

# What a stored secret's value looks like: it must appear in no answer, page or list.
SECRET_VALUE = "sk-live-0123456789-never-shown"


def allow_network(team: Team, max_mode: str = "public", allowlist: list[str] | None = None) -> Team:
    team.allow_network = True
    team.egress_max_mode = max_mode
    team.egress_allowlist = allowlist if allowlist is not None else ["pypi.org"]
    team.save()
    return team


def refusal(sandbox_id: str, destination: str, reason: str, count: int = 3) -> EgressRefusal:
    """A row as the proxy's report makes it: counted per destination and reason."""
    now = timezone.now()
    return EgressRefusal.objects.create(
        sandbox=Sandbox.objects.get(public_id=sandbox_id),
        destination=destination,
        reason=reason,
        count=count,
        first_at=now - timedelta(minutes=5),
        last_at=now,
    )
