"""The housekeeping tunables, read in one place from Django settings (which read them from
the environment through platform_site/env.py), so tests can override them per test."""

from __future__ import annotations

from django.conf import settings

from hosts.backends.base import LABEL_INSTANCE
from tenants.models import Team
from tenants.principal import Principal

# Containers made before instance labels existed count as the default instance's.
DEFAULT_INSTANCE = "default"


def instance_name() -> str:
    """This deployment's name: containers of another one sharing an engine are never touched."""
    return str(settings.SANDHUB_INSTANCE) or DEFAULT_INSTANCE


def instance_labels() -> dict[str, str]:
    """Labels every container Sandhub makes carries, so reconciliation knows its own."""
    return {LABEL_INSTANCE: instance_name()}


def orphan_grace_seconds() -> int:
    """Reconciliation leaves alone whatever is younger than this, whatever the database says:
    a sandbox or pool member being created right now, a clock a little off on a remote host."""
    return int(settings.SANDHUB_ORPHAN_GRACE_SECONDS)


def default_pool_size() -> int:
    """Warm-pool size of images whose own size is 0 (unset)."""
    return int(settings.SANDHUB_WARM_POOL_SIZE)


def system_for(team: Team | None) -> Principal:
    return Principal.system(team)
