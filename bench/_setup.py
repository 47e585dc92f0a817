"""Shared set-up for bench scripts: a throwaway SQLite database, one team, user, host, image."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def django_on_scratch_db() -> None:
    """Configure Django on a fresh SQLite file so a bench never touches real data."""
    sys.path.insert(0, str(ROOT))
    scratch = Path(tempfile.mkdtemp(prefix="sandhub-bench-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{scratch / 'bench.sqlite3'}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def bench_principal(channel: str = "web"):
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from hosts.models import Host, Image
    from tenants.models import Membership, Role, Team
    from tenants.principal import Principal

    team, _ = Team.objects.get_or_create(
        slug="bench", defaults={"name": "Bench", "max_running_sandboxes": 1000}
    )
    user, _ = get_user_model().objects.get_or_create(username="bench")
    Membership.objects.get_or_create(user=user, team=team, defaults={"role": Role.OWNER})
    Host.objects.get_or_create(
        name="local", defaults={"kind": "docker", "endpoint": settings.SANDHUB_DOCKER_URL}
    )
    Image.objects.get_or_create(
        name="python", defaults={"reference": settings.SANDHUB_SANDBOX_IMAGE, "is_default": True}
    )
    return Principal(user=user, team=team, channel=channel)


def summary(label: str, seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    return (
        f"{label:<44} n={len(ordered):<4} median {statistics.median(ordered) * 1000:7.1f} ms"
        f"   p95 {p95 * 1000:7.1f} ms"
    )
